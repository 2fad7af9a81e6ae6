"""Execution-based accuracy for code: the program in the completion's summary, run against the
row's test cases in the sandbox (stages/lib/rewards/sandbox.py).

A row's `tests` is a JSON list (or the list itself) of cases, each either
    {"input": "2 3\\n", "output": "5\\n"}          stdin in, stdout compared line by line
    {"assert": "assert add(2, 3) == 5"}           appended to the program, must exit 0
The program is the last fenced block of the language (```python) in the summary: code inside the
reasoning is thinking, not the answer. Score: 1 when every case passes (the paper's binary
reward), or the share of cases passed (`fraction`).
"""

import json
import re
import secrets
from concurrent.futures import ThreadPoolExecutor

from stages.lib.rewards.sandbox import Sandbox, SandboxLimits
from stages.lib.templates import ResponseFormat

FENCE = re.compile(r"```[ \t]*([\w+-]*)[ \t]*\n(.*?)```", re.S)
LANGUAGE_TAGS = {"python": {"python", "py", "python3"}}
MAX_PROGRAM_CHARS = 20_000
SCORINGS = ("pass_all", "fraction")


def has_tests(tests) -> bool:
    """JSON text in parquet and shard files, a list once parsed; empty or None for other domains."""
    return bool(tests.strip() if isinstance(tests, str) else tests)


def is_code_row(row: dict) -> bool:
    """A row with test cases, or with a reference to them (`tests_at`: GRPO's prompts, stages/lib/data/schema.py)."""
    return has_tests(row.get("tests")) or bool(row.get("tests_at"))


def extract_program(completion: str, fmt: ResponseFormat, language: str = "python") -> str | None:
    """The last fenced block tagged with the language in the answer part of the completion."""
    answer = fmt.answer_text(completion) or ""
    blocks = [code for tag, code in FENCE.findall(answer) if tag.lower() in LANGUAGE_TAGS[language]]
    if not blocks or len(blocks[-1]) > MAX_PROGRAM_CHARS:
        return None
    return blocks[-1]


def same_output(actual: str, expected: str) -> bool:
    lines = lambda text: [line.rstrip() for line in text.strip().splitlines()]  # noqa: E731
    return lines(actual) == lines(expected)


def case_passes(sandbox: Sandbox, program: str, case: dict) -> bool:
    if "assert" in case:
        # A program that exits early (`sys.exit(0)`) skips the asserts: it passes only if the line
        # after them runs, printing a value it cannot know in advance.
        marker = secrets.token_hex(16)
        result = sandbox.run(f"{program}\n\n{case['assert']}\nprint({marker!r})\n")
        return result.ok and result.stdout.rstrip().endswith(marker)
    result = sandbox.run(program, stdin=case["input"])
    return result.ok and same_output(result.stdout, case["output"])


def runs_for(cases: list[dict], scoring: str) -> list[dict]:
    """What to run for a row: with pass_all, every assert case in one program (as HumanEval's `check`
    does), each stdin case on its own; with fraction, each case on its own."""
    asserts = [case["assert"] for case in cases if "assert" in case]
    if scoring != "pass_all" or len(asserts) < 2:
        return cases
    return [case for case in cases if "assert" not in case] + [{"assert": "\n".join(asserts)}]


class CodeVerifier:
    """Scores programs against their cases, running up to `workers` programs at once."""

    def __init__(self, sandbox: Sandbox, workers: int, scoring: str = "pass_all"):
        if scoring not in SCORINGS:
            raise ValueError(f"code scoring {scoring!r}: one of {SCORINGS}")
        self.sandbox, self.scoring = sandbox, scoring
        self.pool = ThreadPoolExecutor(max_workers=workers)

    @classmethod
    def with_timeout(cls, timeout_s: float, workers: int, allow_rlimit_only: bool = False,
                     scoring: str = "pass_all") -> "CodeVerifier":
        """A verifier whose sandbox gives each test case `timeout_s` of wall clock (and as much CPU)."""
        limits = SandboxLimits(wall_time_s=timeout_s, cpu_time_s=max(1, int(timeout_s)),
                               allow_rlimit_only=allow_rlimit_only)
        return cls(Sandbox(limits), workers=workers, scoring=scoring)

    def score_many(self, programs: list[str | None], tests: list[list[dict]]) -> list[float]:
        """A (program, case) pair that occurs more than once in the batch runs once: a group of samples
        of one prompt often holds the same program several times."""
        jobs = [[(program, json.dumps(case, sort_keys=True)) for case in runs_for(cases, self.scoring)]
                if program is not None else [] for program, cases in zip(programs, tests)]
        unique = list(dict.fromkeys(job for row_jobs in jobs for job in row_jobs))
        passed = dict(zip(unique, self.pool.map(
            lambda job: case_passes(self.sandbox, job[0], json.loads(job[1])), unique)))
        results = [[passed[job] for job in row_jobs] for row_jobs in jobs]
        scores = []
        for program, cases, outcome in zip(programs, tests, results):
            if program is None:
                scores.append(0.0)
            elif self.scoring == "pass_all":
                scores.append(float(all(outcome)))
            else:
                scores.append(sum(outcome) / len(cases))
        return scores

    def close(self) -> None:
        self.pool.shutdown(wait=True)
