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
    """Worker loop: says "ready" once math-verify is imported, then (gold, pred) in, bool out."""
    import logging

    from math_verify import parse, verify

    logging.getLogger("math_verify").setLevel(logging.ERROR)  # its "timeout disabled" notice: the kill is ours
    conn.send("ready")
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


class _Worker:
    """One math-verify process. It is spawned ahead of need: start-up (importing sympy) takes seconds."""

    def __init__(self):
        context = multiprocessing.get_context("spawn")  # never fork a process that holds torch threads
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child,), daemon=True)
        self.process.start()
        child.close()
        self.ready = False

    def wait_ready(self, timeout_s: float) -> bool:
        if not self.ready and self.conn.poll(timeout_s):
            self.ready = self.conn.recv() == "ready"
        return self.ready

    def kill(self) -> None:
        self.process.kill()
        self.process.join()
        self.conn.close()


class AnswerVerifier:
    """Compares answers; the symbolic path runs in a worker killed after `timeout_s`. A warm spare
    worker stands by, so a kill costs the timeout, not a new worker's start-up."""

    def __init__(self, timeout_s: float = 5.0):
        self.timeout_s = timeout_s
        self.timeouts = 0
        self.symbolic_calls = 0
        self.worker_deaths = 0
        self._active: _Worker | None = None
        self._spare: _Worker | None = None

    def _worker(self) -> _Worker | None:
        """The worker to use now (promoting the spare), with a new spare warming up behind it."""
        if self._active is None or not self._active.process.is_alive():
            self._active, self._spare = (self._spare or _Worker()), None
        if self._spare is None:
            self._spare = _Worker()
        if not self._active.wait_ready(WORKER_STARTUP_S):
            self._retire()
            return None
        return self._active

    def _retire(self) -> None:
        if self._active is not None:
            self._active.kill()
        self._active = None

    def close(self) -> None:
        self._retire()
        if self._spare is not None:
            self._spare.kill()
        self._spare = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001  interpreter shutdown
            pass

    def symbolic(self, pred: str, gold: str) -> bool:
        self.symbolic_calls += 1
        worker = self._worker()
        if worker is None:  # did not even start in time: count it as a timeout, never hang
            self.timeouts += 1
            return False
        try:
            worker.conn.send((gold, pred))
            if worker.conn.poll(self.timeout_s):
                return worker.conn.recv()
        except (EOFError, OSError):  # the worker died on this input (crash, out of memory): a wrong answer
            self.worker_deaths += 1
            self._retire()
            return False
        self.timeouts += 1
        self._retire()
        return False

    def __call__(self, pred: str | None, gold: str) -> bool:
        if pred is None:
            return False
        verdict = fast_verdict(pred, gold)
        return verdict if verdict is not None else self.symbolic(pred, gold)
