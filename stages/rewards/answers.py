"""Finding the final answer in a completion, in either response format."""

import re

from stages.latex import boxed_answers

ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
MAX_ANSWER_CHARS = 300  # a final answer longer than this is not an answer (MATH's longest are ~150)


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
