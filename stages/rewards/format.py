"""Does a completion have the shape its template asks for?"""

import re

R1_ZERO_SHAPE = re.compile(r"\s*<think>(.*?)</think>\s*<answer>(.*?)</answer>\s*", re.DOTALL)
THINK_SUMMARY_SHAPE = re.compile(r"\s*<think>(.*?)</think>(.*)", re.DOTALL)
TAGS = ("<think>", "</think>", "<answer>", "</answer>")


def tag_counts(completion: str) -> dict[str, int]:
    return {tag: completion.count(tag) for tag in TAGS}


def is_r1_zero_format(completion: str) -> bool:
    """`<think> reasoning </think> <answer> answer </answer>`, each tag once, nothing after."""
    counts = tag_counts(completion)
    if any(n != 1 for n in counts.values()):
        return False
    match = R1_ZERO_SHAPE.fullmatch(completion)
    return bool(match and match.group(1).strip() and match.group(2).strip())


def is_think_summary_format(completion: str) -> bool:
    """`<think> reasoning </think>` then a non-empty summary, no answer tags."""
    counts = tag_counts(completion)
    if counts["<think>"] != 1 or counts["</think>"] != 1 or counts["<answer>"] or counts["</answer>"]:
        return False
    match = THINK_SUMMARY_SHAPE.fullmatch(completion)
    return bool(match and match.group(1).strip() and match.group(2).strip())


def is_well_formatted(completion: str, template: str) -> bool:
    return is_r1_zero_format(completion) if template == "r1_zero" else is_think_summary_format(completion)
