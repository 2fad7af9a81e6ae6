"""Finding the final answer in a completion, in either response format."""

import re

ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
BOXED = "\\boxed{"
MAX_ANSWER_CHARS = 300  # a final answer longer than this is not an answer (MATH's longest are ~150)


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


def summary_of(completion: str) -> str:
    """The text after the reasoning block: what a reader sees (and what the helpful RM judges).
    A reasoning block that never closes leaves no summary."""
    end = completion.rfind("</think>")
    if end == -1:
        return "" if "<think>" in completion else completion
    return completion[end + len("</think>"):]


def extract_final_answer(completion: str, template: str) -> str | None:
    """r1_zero: the last <answer> block (a \\boxed{} inside it wins); chat: the \\boxed{} answer of
    the summary. Several different boxed answers are none."""
    if template == "r1_zero":
        end = completion.rfind(ANSWER_CLOSE)
        start = completion.rfind(ANSWER_OPEN, 0, max(end, 0))
        if end == -1 or start == -1:
            return None
        block = completion[start + len(ANSWER_OPEN): end]
        boxed = boxed_answers(block)
        answer = one_answer(boxed) if boxed else block
    else:
        answer = one_answer(boxed_answers(summary_of(completion)))
    if answer is None:
        return None
    answer = answer.strip()
    return answer if 0 < len(answer) <= MAX_ANSWER_CHARS else None
