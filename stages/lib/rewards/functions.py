"""The rewards as TRL reward functions: `f(prompts, completions, completion_ids, **columns)` returns
one float per completion, or None where the reward does not apply (TRL skips those). Dataset
columns such as `solution` arrive as keyword arguments.

    functions = build_reward_functions(["accuracy", "format"], RewardSettings(template="r1_zero"))
"""

import os
from dataclasses import dataclass

from stages.lib.data.schema import TestCases
from stages.lib.rewards.code import has_tests, is_code_row
from stages.lib.rewards.grading import Grader, has_solution
from stages.lib.rewards.language import language_consistency
from stages.lib.rewards.length import soft_overlong_punishment
from stages.lib.rewards.registry import RULE_REWARDS, implementation_of
from stages.lib.rewards.verify import verify_lanes
from stages.lib.templates import ResponseFormat, response_format


@dataclass(frozen=True)
class RewardSettings:
    template: str = "chat"  # which response format the rewards expect
    language: str = "en"  # target language of the chain of thought
    max_completion_length: int = 256  # for the overlong punishment
    overlong_buffer: int = 64  # DAPO's L_cache
    verify_timeout_s: float = 5.0
    code_language: str = "python"
    code_scoring: str = "pass_all"  # the paper's binary reward; or "fraction" of test cases passed
    code_timeout_s: float = 5.0  # wall clock per test case
    allow_rlimit_only: bool = False  # run model code without namespace isolation when bwrap is missing
    reasoning_prefill: str = ""  # what the chat template opens the response with (templates.reasoning_prefill)


def rows_of(columns: dict, n: int) -> list[dict]:
    """The dataset columns TRL passes as keyword arguments, as one row per completion."""
    return [{key: values[i] for key, values in columns.items() if isinstance(values, list) and len(values) > i}
            for i in range(n)]


def completion_text(completion, prefill: str = "") -> str:
    """TRL passes a string for raw prompts and a list of messages for conversational ones; neither holds
    the reasoning block a template opened in the prompt (`prefill`), which is part of the response."""
    if isinstance(completion, str):
        return prefill + completion
    return prefill + completion[-1]["content"] if completion else ""


class RewardFunction:
    def __init__(self, name: str, settings: RewardSettings):
        self.__name__ = name  # TRL logs rewards/<name>/mean
        self.settings = settings

    @property
    def format(self) -> ResponseFormat:
        return response_format(self.settings.template)

    def score(self, text: str, num_tokens: int, row: dict) -> float | None:
        raise NotImplementedError

    def __call__(self, prompts=None, completions=(), completion_ids=None, **columns) -> list[float | None]:
        rows = rows_of(columns, len(completions))
        lengths = [len(ids) for ids in completion_ids] if completion_ids is not None else [0] * len(completions)
        return [self.score(completion_text(completion, self.settings.reasoning_prefill), length, row)
                for completion, length, row in zip(completions, lengths, rows)]


class Graded(RewardFunction):
    """Correctness from the one grader (stages/lib/rewards/grading.py) on the rows of the reward's domain;
    None for other rows (TRL skips those). The batch's checks run side by side: the verifier's lanes,
    the sandbox's workers."""

    def __init__(self, name, settings, grader: Grader):
        super().__init__(name, settings)
        self.grader = grader
        self.test_cases = TestCases()  # code rows whose tests are referenced, not carried

    def applies(self, row: dict) -> bool:
        raise NotImplementedError

    def score(self, text, num_tokens, row):
        return self(completions=[text], **{key: [value] for key, value in row.items()})[0]

    def __call__(self, prompts=None, completions=(), completion_ids=None, **columns):
        rows = rows_of(columns, len(completions))
        scored = [i for i, row in enumerate(rows) if self.applies(row)]
        for i in scored:
            if rows[i].get("tests_at") and not has_tests(rows[i].get("tests")):
                rows[i]["tests"] = self.test_cases(rows[i]["tests_at"])
        prefill = self.settings.reasoning_prefill
        answers = [self.grader.answer(completion_text(completions[i], prefill), rows[i]) for i in scored]
        results = self.grader.score_many(answers, [rows[i] for i in scored])
        scores: list[float | None] = [None] * len(completions)
        for i, score in zip(scored, results):
            scores[i] = score
        return scores


class Accuracy(Graded):
    """1 if the final answer equals the row's `solution`, else 0; None for code rows and rows without one."""

    def applies(self, row):
        return not is_code_row(row) and has_solution(row)


class Code(Graded):
    """Runs the program of the completion's answer part against the row's `tests` in the sandbox; None
    for rows without tests (other domains)."""

    def applies(self, row):
        return is_code_row(row)


class Format(RewardFunction):
    def score(self, text, num_tokens, row):
        return float(self.format.is_well_formatted(text))


class TagCount(RewardFunction):
    """Partial credit per tag that appears exactly as often as the format wants (once or never)."""

    def score(self, text, num_tokens, row):
        return self.format.tag_score(text)


class LanguageConsistency(RewardFunction):
    def score(self, text, num_tokens, row):
        return language_consistency(text, self.settings.language)


class SoftOverlong(RewardFunction):
    def score(self, text, num_tokens, row):
        return soft_overlong_punishment(num_tokens, self.settings.max_completion_length, self.settings.overlong_buffer)


def build_reward_functions(names: list[str], settings: RewardSettings) -> list[RewardFunction]:
    """The named rule rewards (stages.lib.rewards.registry); `accuracy` and `code` share one grader."""
    unknown = [n for n in names if n not in RULE_REWARDS]
    if unknown:
        raise ValueError(f"unknown rule reward(s) {unknown}: available {sorted(RULE_REWARDS)}")
    classes = {name: implementation_of(name) for name in names}
    grader = None
    if any(issubclass(cls, Graded) for cls in classes.values()):
        grader = Grader(settings.template, settings.verify_timeout_s, lanes=verify_lanes(),
                        code_timeout_s=settings.code_timeout_s, code_workers=len(os.sched_getaffinity(0)),
                        allow_rlimit_only=settings.allow_rlimit_only, code_scoring=settings.code_scoring,
                        code_language=settings.code_language)
        if "code" in names:
            grader.start_sandbox()
    return [cls(name, settings, grader) if issubclass(cls, Graded) else cls(name, settings)
            for name, cls in classes.items()]
