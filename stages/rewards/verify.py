"""Is a predicted answer equal to the gold one?

Most answers are plain numbers: those are compared exactly, in this process, without sympy.
Everything else goes to math-verify in a separate worker process that is killed at a hard
deadline: math-verify's own timeout relies on signal.alarm, which fails outside the main thread and
does not stop every runaway sympy computation (`10^{10^{10^{10}}}`).
"""

import multiprocessing
import re
from fractions import Fraction

NUMBER = re.compile(r"^[-+]?(\d+(\.\d*)?|\.\d+)$")
FRACTION = re.compile(r"^([-+]?\d+)\s*/\s*(\d+)$|^\\[dt]?frac\{([-+]?\d+)\}\{(\d+)\}$")
MAX_NUMBER_DIGITS = 200
WORKER_STARTUP_S = 10.0


def normalize(answer: str) -> str:
    answer = answer.strip().strip("$").strip()
    answer = re.sub(r"\\text\{(.*?)\}", r"\1", answer)
    answer = re.sub(r"(?<=\d)\s+(?=\d)", "␣", answer)  # "1 2" is not "12"
    answer = re.sub(r"\\[,!;: ]|\s+", "", answer)
    answer = answer.replace("{,}", "")  # 1{,}000
    return answer.rstrip(".")


def as_number(answer: str) -> Fraction | None:
    """The exact value of an integer, decimal or simple fraction; None for anything else."""
    text = answer.replace(",", "") if re.fullmatch(r"[-+]?\d{1,3}(,\d{3})+", answer) else answer
    if len(text) > MAX_NUMBER_DIGITS:
        return None
    if NUMBER.match(text):
        return Fraction(text)
    match = FRACTION.match(text)
    if match:
        num, den = (match.group(1), match.group(2)) if match.group(1) else (match.group(3), match.group(4))
        return Fraction(int(num), int(den)) if int(den) else None
    return None


def fast_verdict(pred: str, gold: str) -> bool | None:
    """True/False when decidable without sympy, else None."""
    pred_n, gold_n = normalize(pred), normalize(gold)
    if pred_n == gold_n:
        return True
    pred_v, gold_v = as_number(pred_n), as_number(gold_n)
    if pred_v is not None and gold_v is not None:
        return pred_v == gold_v
    return None


def _serve(conn) -> None:
    """Worker loop: (gold, pred) in, bool out. Runs in its own process."""
    from math_verify import parse, verify

    while True:
        try:
            gold, pred = conn.recv()
        except EOFError:
            return
        try:
            gold_parsed = parse(f"\\boxed{{{gold}}}", parsing_timeout=None)
            pred_parsed = parse(f"\\boxed{{{pred}}}", parsing_timeout=None)
            verdict = bool(gold_parsed) and bool(pred_parsed) and verify(gold_parsed, pred_parsed, timeout_seconds=None)
        except BaseException:  # noqa: BLE001  any failure on model output is a wrong answer
            verdict = False
        conn.send(bool(verdict))


class AnswerVerifier:
    """Compares answers; the symbolic path runs in a worker killed after `timeout_s`."""

    def __init__(self, timeout_s: float = 5.0):
        self.timeout_s = timeout_s
        self.timeouts = 0
        self.symbolic_calls = 0
        self._process = None
        self._conn = None
        self._fresh_worker = False

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")  # never fork a process that holds torch threads
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child,), daemon=True)
        self._process.start()
        child.close()
        self._fresh_worker = True

    def _kill(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.join()
            self._conn.close()
        self._process = self._conn = None

    def close(self) -> None:
        self._kill()

    def __del__(self):
        try:
            self._kill()
        except Exception:  # noqa: BLE001  interpreter shutdown
            pass

    def symbolic(self, pred: str, gold: str) -> bool:
        if self._process is None or not self._process.is_alive():
            self._start()
        self.symbolic_calls += 1
        self._conn.send((gold, pred))
        # The first call after a (re)start also pays the worker's start-up and math-verify's import.
        deadline = self.timeout_s + (WORKER_STARTUP_S if self._fresh_worker else 0.0)
        self._fresh_worker = False
        if self._conn.poll(deadline):
            try:
                return self._conn.recv()
            except EOFError:
                self._kill()
                return False
        self.timeouts += 1
        self._kill()
        return False

    def __call__(self, pred: str | None, gold: str) -> bool:
        if pred is None:
            return False
        verdict = fast_verdict(pred, gold)
        return verdict if verdict is not None else self.symbolic(pred, gold)
