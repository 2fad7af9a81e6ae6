"""The rewards as TRL reward functions: `f(prompts, completions, completion_ids, **columns)` returns
one float per completion, or None where the reward does not apply (TRL skips those). Dataset
columns such as `solution` arrive as keyword arguments.

    functions = build_reward_functions(["accuracy", "format"], RewardSettings(template="r1_zero"))
"""

import os
from dataclasses import dataclass

from stages.data.schema import parse_tests
from stages.rewards.answers import extract_final_answer
from stages.rewards.code import CodeVerifier, extract_program, has_tests
from stages.rewards.format import TAGS, is_well_formatted
from stages.rewards.language import language_consistency
from stages.rewards.length import soft_overlong_punishment
from stages.rewards.verify import AnswerVerifier, verify_lanes


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


def completion_text(completion) -> str:
    """TRL passes a string for raw prompts and a list of messages for conversational ones."""
    if isinstance(completion, str):
        return completion
    return completion[-1]["content"] if completion else ""


class RewardFunction:
    def __init__(self, name: str, settings: RewardSettings):
        self.__name__ = name  # TRL logs rewards/<name>/mean
        self.settings = settings

    def score(self, text: str, num_tokens: int, row: dict) -> float | None:
        raise NotImplementedError

    def __call__(self, prompts=None, completions=(), completion_ids=None, **columns) -> list[float | None]:
        scores = []
        for i, completion in enumerate(completions):
            row = {key: values[i] for key, values in columns.items() if isinstance(values, list) and len(values) > i}
            num_tokens = len(completion_ids[i]) if completion_ids is not None else 0
            scores.append(self.score(completion_text(completion), num_tokens, row))
        return scores


class Accuracy(RewardFunction):
    """1 if the final answer equals the row's `solution`, else 0; None for rows without one."""

    def __init__(self, name, settings):
        super().__init__(name, settings)
        self.verifier = AnswerVerifier(settings.verify_timeout_s, lanes=verify_lanes())

    def score(self, text, num_tokens, row):
        return self(completions=[text], solution=[row.get("solution")])[0]

    def __call__(self, prompts=None, completions=(), completion_ids=None, **columns):
        """The batch's symbolic checks run side by side (the verifier's lanes)."""
        solutions = columns.get("solution") or [None] * len(completions)
        scored = [i for i, s in enumerate(solutions) if s is not None and str(s).strip() != ""]
        verdicts = self.verifier.verify_many(
            [(extract_final_answer(completion_text(completions[i]), self.settings.template), str(solutions[i]))
             for i in scored])
        scores: list[float | None] = [None] * len(completions)
        for i, verdict in zip(scored, verdicts):
            scores[i] = float(verdict)
        return scores


class Code(RewardFunction):
    """Runs the program of the completion's summary against the row's `tests` in the sandbox; None for
    rows without tests (other domains)."""

    def __init__(self, name, settings):
        super().__init__(name, settings)
        self.verifier = CodeVerifier.with_timeout(settings.code_timeout_s, workers=len(os.sched_getaffinity(0)),
                                                  allow_rlimit_only=settings.allow_rlimit_only,
                                                  scoring=settings.code_scoring)

    def score(self, text, num_tokens, row):
        return self(completions=[text], tests=[row.get("tests")])[0]

    def __call__(self, prompts=None, completions=(), completion_ids=None, **columns):
        tests = columns.get("tests") or [None] * len(completions)
        scored = [i for i, cases in enumerate(tests) if has_tests(cases)]
        programs = [extract_program(completion_text(completions[i]), self.settings.template,
                                    self.settings.code_language) for i in scored]
        results = self.verifier.score_many(programs, [parse_tests(tests[i]) for i in scored])
        scores: list[float | None] = [None] * len(completions)
        for i, score in zip(scored, results):
            scores[i] = score
        return scores


class Format(RewardFunction):
    def score(self, text, num_tokens, row):
        return float(is_well_formatted(text, self.settings.template))


class TagCount(RewardFunction):
    """Partial credit per tag that appears exactly as often as the template wants (once or never)."""

    def score(self, text, num_tokens, row):
        wanted = dict.fromkeys(TAGS, 1) if self.settings.template == "r1_zero" else \
            {"<think>": 1, "</think>": 1, "<answer>": 0, "</answer>": 0}
        return sum(text.count(tag) == n for tag, n in wanted.items()) / len(wanted)


class LanguageConsistency(RewardFunction):
    def score(self, text, num_tokens, row):
        return language_consistency(text, self.settings.language)


class SoftOverlong(RewardFunction):
    def score(self, text, num_tokens, row):
        return soft_overlong_punishment(num_tokens, self.settings.max_completion_length, self.settings.overlong_buffer)


REWARDS = {"accuracy": Accuracy, "code": Code, "format": Format, "tag_count": TagCount,
           "language": LanguageConsistency, "overlong": SoftOverlong}


def build_reward_functions(names: list[str], settings: RewardSettings) -> list[RewardFunction]:
    unknown = [n for n in names if n not in REWARDS]
    if unknown:
        raise ValueError(f"unknown reward(s) {unknown}: available {sorted(REWARDS)}")
    return [REWARDS[name](name, settings) for name in names]
