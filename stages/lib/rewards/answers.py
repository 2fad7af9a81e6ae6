"""Finding the final answer in a completion, in either response format."""

import re

from stages.lib.latex import boxed_answers, one_answer
from stages.lib.templates import CHOICE_LETTERS, ResponseFormat

MAX_ANSWER_CHARS = 300  # a final answer longer than this is not an answer (MATH's longest are ~150)
# Multiple choice (GPQA, templates.CHOICE_INSTRUCTION): a summary that boxes no letter may give it on
# simple-evals' `Answer: C` line, the form the published figures' harnesses read
ANSWER_LINE = re.compile(rf"(?i:answer)[\s*_]*[:：]\s*[\s*_($]*([{CHOICE_LETTERS}])\b")


def is_choice_row(row: dict) -> bool:
    return str(row.get("solution") or "") in tuple(CHOICE_LETTERS) and "\nA) " in str(row.get("prompt") or "")


def choice_answer(text: str) -> str | None:
    """The letter of the last `Answer: X`."""
    letters = ANSWER_LINE.findall(text)
    return letters[-1] if letters else None


def extract_final_answer(completion: str, fmt: ResponseFormat) -> str | None:
    """The boxed answer of the format's answer part (r1_zero: the last <answer> block, whose own text
    is the answer when it boxes nothing; chat: the summary). Several different boxed answers are none."""
    block = fmt.answer_text(completion)
    if block is None:
        return None
    boxed = boxed_answers(block)
    answer = one_answer(boxed) if boxed or not fmt.bare_answer else block
    if answer is None:
        return None
    answer = answer.strip()
    return answer if 0 < len(answer) <= MAX_ANSWER_CHARS else None
