"""Is a sampled completion right? Math rows (a gold `solution`) by their final answer, code rows
(`tests`) by running their program in the sandbox. One place for the stages that judge samples:
rejection sampling and evaluation. (GRPO uses the two reward functions, `accuracy` and `code`.)
"""

from stages.data.schema import parse_tests
from stages.rewards.answers import extract_final_answer
from stages.rewards.code import CodeVerifier, extract_program, is_code_row
from stages.rewards.verify import AnswerVerifier


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
    return None if (row.get("solution") or "").strip() else "no gold answer (solution) and no tests"


class Grader:
    def __init__(self, template: str, verify_timeout_s: float = 5.0, lanes: int = 1, code_timeout_s: float = 5.0,
                 code_workers: int = 1, allow_rlimit_only: bool = False):
        self.template = template
        self.verifier = AnswerVerifier(verify_timeout_s, lanes=lanes)
        self._code_settings = (code_timeout_s, code_workers, allow_rlimit_only)
        self._code: CodeVerifier | None = None  # the sandbox starts with the first code row

    @property
    def code(self) -> CodeVerifier:
        if self._code is None:
            timeout_s, workers, allow_rlimit_only = self._code_settings
            self._code = CodeVerifier.with_timeout(timeout_s, workers, allow_rlimit_only)
        return self._code

    def answer(self, completion: str, row: dict) -> str | None:
        """What is graded: the program of a code row, the final answer of a math row."""
        if is_code_row(row):
            return extract_program(completion, self.template)
        return extract_final_answer(completion, self.template)

    def grade_many(self, answers: list[str | None], rows: list[dict]) -> list[bool]:
        verdicts: list[bool | None] = [None] * len(rows)
        code = [i for i, row in enumerate(rows) if is_code_row(row)]
        math = [i for i, row in enumerate(rows) if not is_code_row(row)]
        if code:
            scores = self.code.score_many([answers[i] for i in code], [parse_tests(rows[i]["tests"]) for i in code])
            for i, score in zip(code, scores):
                verdicts[i] = score == 1.0
        for i, verdict in zip(math, self.verifier.verify_many([(answers[i], str(rows[i]["solution"])) for i in math])):
            verdicts[i] = verdict
        return verdicts

    def close(self) -> None:
        self.verifier.close()
        if self._code is not None:
            self._code.close()
