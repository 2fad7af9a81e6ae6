"""Finding the final answer in a completion, in either response format."""

ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
BOXED = "\\boxed{"
MAX_ANSWER_CHARS = 300  # a final answer longer than this is not an answer (MATH's longest are ~150)


def last_boxed(text: str) -> str | None:
    """Content of the last balanced \\boxed{...}, with nested braces; None when there is none.

    Linear in the text: an earlier \\boxed{ that has not closed by the start of a later unbalanced
    one never closes (the later one's brace only deepens it), so each scan stops there."""
    limit = len(text)
    start = text.rfind(BOXED)
    while start != -1:
        depth, i = 1, start + len(BOXED)
        while i < limit and depth:
            char = text[i]
            depth += 1 if char == "{" else -1 if char == "}" else 0
            i += 1
        if depth == 0:
            return text[start + len(BOXED): i - 1]
        limit = start
        start = text.rfind(BOXED, 0, start)
    return None


def summary_of(completion: str) -> str:
    """The text after the reasoning block: what a reader sees (and what the helpful RM judges).
    A reasoning block that never closes leaves no summary."""
    end = completion.rfind("</think>")
    if end == -1:
        return "" if "<think>" in completion else completion
    return completion[end + len("</think>"):]


def extract_final_answer(completion: str, template: str) -> str | None:
    """r1_zero: the last <answer> block (a \\boxed{} inside it wins); chat: the last \\boxed{} of
    the summary."""
    if template == "r1_zero":
        end = completion.rfind(ANSWER_CLOSE)
        start = completion.rfind(ANSWER_OPEN, 0, max(end, 0))
        if end == -1 or start == -1:
            return None
        block = completion[start + len(ANSWER_OPEN): end]
        answer = last_boxed(block) or block
    else:
        answer = last_boxed(summary_of(completion))
    if answer is None:
        return None
    answer = answer.strip()
    return answer if 0 < len(answer) <= MAX_ANSWER_CHARS else None
