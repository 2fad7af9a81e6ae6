"""The one judge of correctness. A math row (a gold `solution`) is right when its final answer
verifies against the solution, a code row (`tests`) when its program passes the cases in the sandbox.
GRPO's `accuracy` and `code` rewards (stages/lib/rewards/functions.py), rejection sampling and evaluation
all grade through a `Grader`: one owner of the answer verifier, the sandbox and the domain split.
"""

from stages.lib.data.schema import parse_tests
from stages.lib.latex import boxed_answers
from stages.lib.rewards.answers import choice_answer, extract_final_answer, is_choice_row
from stages.lib.rewards.code import CodeVerifier, extract_program, is_code_row
from stages.lib.rewards.verify import AnswerVerifier
from stages.lib.templates import ResponseFormat, response_format


def has_solution(row: dict) -> bool:
    return str(row.get("solution") or "").strip() != ""


def gold_problem(row: dict) -> str | None:
    """Why a row cannot be graded, or None."""
    if not (row.get("prompt") or "").strip():
        return "no prompt"
    if is_code_row(row):
        try:
            parse_tests(row["tests"])
        except ValueError as error:
            return str(error)
        return None
    return None if has_solution(row) else "no gold answer (solution) and no tests"


def graded_answer(completion: str, row: dict, fmt: ResponseFormat, code_language: str = "python") -> str | None:
    """What is graded in a completion: the program of a code row, the final answer of a math row (a multiple
    choice row's summary that boxes nothing may give its letter on an `Answer: X` line)."""
    if is_code_row(row):
        return extract_program(completion, fmt, code_language)
    answer = extract_final_answer(completion, fmt)
    if answer is None and is_choice_row(row):
        text = fmt.answer_text(completion)
        if text and not boxed_answers(text):
            return choice_answer(text)
    return answer


class Grader:
    """Scores answers against their rows: `answer()` picks what is graded from a completion (the
    program of a code row, the final answer of a math row), `score_many()` scores a batch of them.
    Code is scored by `code_scoring`: 1 when every case passes (the paper's binary reward), or the
    share of cases passed (`fraction`)."""

    def __init__(self, fmt: ResponseFormat | str, verify_timeout_s: float = 5.0, lanes: int = 1,
                 code_timeout_s: float = 5.0, code_workers: int = 1, allow_rlimit_only: bool = False,
                 code_scoring: str = "pass_all", code_language: str = "python"):
        self.format = response_format(fmt)
        self.verifier = AnswerVerifier(verify_timeout_s, lanes=lanes)
        self.code_language = code_language
        self._code_settings = (code_timeout_s, code_workers, allow_rlimit_only, code_scoring)
        self._code: CodeVerifier | None = None  # the sandbox starts with the first code row, or start_sandbox()

    @property
    def code(self) -> CodeVerifier:
        if self._code is None:
            timeout_s, workers, allow_rlimit_only, scoring = self._code_settings
            self._code = CodeVerifier.with_timeout(timeout_s, workers, allow_rlimit_only, scoring)
        return self._code

    def start_sandbox(self) -> None:
        """Starts the code sandbox now, where a job that will run code begins: a site that refuses its
        namespaces fails the job before it samples or trains, not at its first code row."""
        _ = self.code

    def answer(self, completion: str, row: dict) -> str | None:
        return graded_answer(completion, row, self.format, self.code_language)

    def score_many(self, answers: list[str | None], rows: list[dict]) -> list[float | None]:
        """One score per answer in [0, 1]; None for a row with neither tests nor a gold answer."""
        scores: list[float | None] = [None] * len(rows)
        code = [i for i, row in enumerate(rows) if is_code_row(row)]
        math = [i for i, row in enumerate(rows) if not is_code_row(row) and has_solution(row)]
        if code:
            results = self.code.score_many([answers[i] for i in code], [parse_tests(rows[i]["tests"]) for i in code])
            for i, score in zip(code, results):
                scores[i] = score
        for i, verdict in zip(math, self.verifier.verify_many([(answers[i], str(rows[i]["solution"])) for i in math])):
            scores[i] = float(verdict)
        return scores

    def grade_many(self, answers: list[str | None], rows: list[dict]) -> list[bool]:
        """Right or wrong: every case passed, the answer verified. A row that cannot be graded is wrong
        (callers check their rows with gold_problem first)."""
        return [score == 1.0 for score in self.score_many(answers, rows)]

    def close(self) -> None:
        self.verifier.close()
        if self._code is not None:
            self._code.close()
