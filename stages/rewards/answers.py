"""Finding the final answer in a completion, in either response format."""

import re

ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
BOXED = "\\boxed{"
MAX_ANSWER_CHARS = 1000  # a final answer longer than this is not an answer


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...}, with nested braces; None when absent or unbalanced."""
    start = text.rfind(BOXED)
    while start != -1:
        depth, i = 1, start + len(BOXED)
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            return text[start + len(BOXED): i - 1]
        start = text.rfind(BOXED, 0, start)  # unbalanced: try an earlier one
    return None


def summary_of(completion: str) -> str:
    """The text after the reasoning block: what a reader sees (and what the helpful RM judges)."""
    end = completion.rfind("</think>")
    return completion if end == -1 else completion[end + len("</think>"):]


def extract_final_answer(completion: str, template: str) -> str | None:
    """r1_zero: the last <answer> block (a \\boxed{} inside it wins); chat: the last \\boxed{} of
    the summary."""
    if template == "r1_zero":
        blocks = ANSWER_TAG.findall(completion)
        if not blocks:
            return None
        answer = last_boxed(blocks[-1]) or blocks[-1]
    else:
        answer = last_boxed(summary_of(completion))
    if answer is None:
        return None
    answer = answer.strip()
    return answer if 0 < len(answer) <= MAX_ANSWER_CHARS else None
