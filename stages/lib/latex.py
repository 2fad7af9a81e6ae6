"""LaTeX answer markup shared by the data preparation (gold answers inside worked solutions) and the
rewards (a model's final answer): the contents of \\boxed{...}."""

import re

BOXED = "\\boxed{"


def boxed_answers(text: str) -> list[str]:
    """Contents of every balanced \\boxed{...}, with nested braces, the last first.

    Linear in the text: each scan stops where the previous (later) one started; an earlier \\boxed{
    that has not closed by then never closes (a later brace only deepens it)."""
    found = []
    limit = len(text)
    start = text.rfind(BOXED)
    while start != -1:
        depth, i = 1, start + len(BOXED)
        while i < limit and depth:
            char = text[i]
            depth += 1 if char == "{" else -1 if char == "}" else 0
            i += 1
        if depth == 0:
            found.append(text[start + len(BOXED): i - 1])
        limit = start
        start = text.rfind(BOXED, 0, start)
    return found


def last_boxed(text: str) -> str | None:
    """Content of the last balanced \\boxed{...}; None when there is none."""
    return next(iter(boxed_answers(text)), None)


def one_answer(answers: list[str]) -> str | None:
    """The one answer among a text's boxed answers. Boxing several different answers hedges, and a
    hedge is no answer (a real model writes "\\boxed{3} or \\boxed{5}"; the last box alone would score
    it right)."""
    if len({re.sub(r"\s+", "", answer) for answer in answers}) > 1:
        return None
    return next(iter(answers), None)
