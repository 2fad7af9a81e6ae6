"""Is a predicted answer equal to the gold one?

Most answers are plain numbers or the gold's own text: those are decided exactly, in this process,
without sympy. An answer that hedges in words between more values than the gold has is wrong. Answers
whose evaluation can run away (power towers, factorials of factorials) are wrong without evaluation: no
gold answer takes those forms, and one that equals the gold's text is already right. Everything else
goes to math-verify in worker processes killed at a hard deadline: math-verify's own timeout relies on
signal.alarm, which fails outside the main thread and does not stop every runaway sympy computation. A
batch is spread over several workers (`lanes`).
"""

import multiprocessing
import os
import re
import time
from collections import deque
from fractions import Fraction
from multiprocessing.connection import wait

NUMBER = re.compile(r"^[-+]?(\d+(\.\d*)?|\.\d+)$")
FRACTION = re.compile(r"^([-+]?\d+)\s*/\s*(\d+)$|^\\[dt]?frac\{([-+]?\d+)\}\{(\d+)\}$")
MAX_NUMBER_DIGITS = 200
WORKER_STARTUP_S = 10.0


def normalize(answer: str) -> str:
    answer = answer.strip().strip("$").strip()
    answer = re.sub(r"\\text\{(.*?)\}", r"\1", answer)
    answer = re.sub(r"(?<=\d)\s+(?=\d)", "␣", answer)  # "1 2" is not "12"
    answer = re.sub(r",\s+", ",␣", answer)  # "32, 349" is a list, "32,349" a number
    answer = re.sub(r"\\[,!;: ]|\s+", "", answer)
    answer = answer.replace("{,}", "")  # 1{,}000
    return answer.rstrip(".")


def as_number(answer: str) -> Fraction | None:
    """The exact value of an integer, decimal or simple fraction; None for anything else."""
    # Thousands separators: "0,111" is a decimal comma (or a list), not 111.
    text = answer.replace(",", "") if re.fullmatch(r"[-+]?[1-9]\d{0,2}(,\d{3})+", answer) else answer
    if len(text) > MAX_NUMBER_DIGITS:
        return None
    if NUMBER.match(text):
        return Fraction(text)
    match = FRACTION.match(text)
    if match:
        num, den = (match.group(1), match.group(2)) if match.group(1) else (match.group(3), match.group(4))
        return Fraction(int(num), int(den)) if int(den) else None
    return None


# Words and connectives that offer alternatives or take one back: "3 \\lor 5", "5 (not 3)", "not 10, it's 1,000.99".
HEDGE = re.compile(r"\\lor\b|\\vee\b|\b(?:or|nor|not|either|maybe|perhaps|possibly|otherwise|instead|wait|"
                   r"actually|alternatively)\b", re.IGNORECASE)
VALUE = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)?")


def values_in(text: str) -> set[Fraction]:
    """The different numbers a text names (1,000.99 is one number)."""
    return {Fraction(match.replace(",", "")) for match in VALUE.findall(text)}


def is_hedge(pred: str, gold: str) -> bool:
    """One box that names several values in words hedges as several boxes do, and is no answer: math-verify
    takes "3 \\lor 5" or "5 (not 3)" for 5. Unless the gold itself names several values (a list, a set)."""
    return bool(HEDGE.search(pred)) and len(values_in(pred)) > max(1, len(values_in(gold)))


def fast_verdict(pred: str, gold: str) -> bool | None:
    """True/False when decidable without sympy, else None."""
    pred_n, gold_n = normalize(pred), normalize(gold)
    if pred_n == gold_n:
        return True
    pred_v, gold_v = as_number(pred_n), as_number(gold_n)
    if pred_v is not None and gold_v is not None:
        return pred_v == gold_v
    return None


FACTORIAL_OF_FACTORIAL = re.compile(r"!{3,}|!\s*[)}\]]\s*!")
MAX_EXPONENT_DEPTH = 2  # 2^{3^{2}} is an answer; 10^{10^{10^{10}}} is an attack
MAX_NESTED_EXPONENT_DIGITS = 1  # ... and so is 10^{10^{10}}
MAX_EXPONENT_DIGITS = 6


def exponent_numbers(answer: str) -> list[tuple[int, int]]:
    """(exponent depth, digits) of every integer inside a superscript: 2^{10} -> [(1, 2)]."""
    found, braces, depth, pending = [], [], 0, False
    for match in re.finditer(r"\^|\{|\}|\d+", answer):
        token = match.group()
        if token == "^":
            pending = True
            continue
        if token == "{":
            braces.append(pending)
            depth += pending
        elif token == "}":
            depth -= braces.pop() if braces else 0
        else:
            found.append((depth + pending, len(token)))  # a bare digit after ^ is one level up
        pending = False
    return found


def pathological(answer: str) -> bool:
    if FACTORIAL_OF_FACTORIAL.search(answer):
        return True
    for depth, digits in exponent_numbers(answer):
        if depth > MAX_EXPONENT_DEPTH or (depth > 1 and digits > MAX_NESTED_EXPONENT_DIGITS) \
                or digits > MAX_EXPONENT_DIGITS and depth:
            return True
    return False


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
            verdict = bool(gold_parsed) and bool(pred_parsed) and verify(gold_parsed, pred_parsed,
                                                                         timeout_seconds=None)
        except BaseException:  # any failure on model output is a wrong answer
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
        try:
            if not self.ready and self.conn.poll(timeout_s):
                self.ready = self.conn.recv() == "ready"
        except (EOFError, OSError):  # died while starting
            return False
        return self.ready

    def kill(self) -> None:
        self.process.kill()
        self.process.join()
        self.conn.close()


def verify_lanes() -> int:
    """Workers for a batch: the CPUs this process may use, up to 4 (math-verify is single-threaded)."""
    return min(4, len(os.sched_getaffinity(0)))


class _Lane:
    """One math-verify worker in use and a warm spare behind it, so a kill costs the timeout, not a
    new worker's start-up."""

    def __init__(self):
        self.active: _Worker | None = None
        self.spare: _Worker | None = None

    def worker(self) -> _Worker | None:
        """The worker to use now (promoting the spare), with a new spare warming up behind it."""
        if self.active is None or not self.active.process.is_alive():
            self.active, self.spare = (self.spare or _Worker()), None
        if self.spare is None:
            self.spare = _Worker()
        if not self.active.wait_ready(WORKER_STARTUP_S):
            self.retire()
            return None
        return self.active

    def retire(self) -> None:
        if self.active is not None:
            self.active.kill()
        self.active = None

    def close(self) -> None:
        self.retire()
        if self.spare is not None:
            self.spare.kill()
        self.spare = None


class AnswerVerifier:
    """Compares answers; the symbolic path runs in `lanes` workers at once, each killed after
    `timeout_s` on one pair."""

    def __init__(self, timeout_s: float = 5.0, lanes: int = 1):
        self.timeout_s = timeout_s
        self.timeouts = 0
        self.symbolic_calls = 0
        self.worker_deaths = 0
        self.slowest_s = 0.0  # the longest symbolic check, from hand-over to verdict or kill
        self.lanes = [_Lane() for _ in range(max(1, lanes))]

    def close(self) -> None:
        for lane in self.lanes:
            lane.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    def __call__(self, pred: str | None, gold: str) -> bool:
        return self.verify_many([(pred, gold)])[0]

    def verify_many(self, pairs: list[tuple[str | None, str]]) -> list[bool]:
        """Verdicts for (predicted, gold) pairs, in order; every pair returns by its deadline."""
        verdicts: list[bool | None] = [None] * len(pairs)
        symbolic = deque()
        for index, (pred, gold) in enumerate(pairs):
            if pred is None:
                verdicts[index] = False
                continue
            verdict = False if is_hedge(pred, gold) else fast_verdict(pred, gold)
            if verdict is None and pathological(pred):
                verdict = False
            if verdict is None:
                symbolic.append(index)
            verdicts[index] = verdict
        self.symbolic_calls += len(symbolic)
        busy: dict[int, tuple[int, _Worker, float]] = {}  # lane -> (pair, worker, deadline)
        while symbolic or busy:
            for number, lane in enumerate(self.lanes):
                while number not in busy and symbolic:
                    index = symbolic.popleft()
                    worker = lane.worker()
                    if worker is None:  # did not even start in time: a timeout, never a hang
                        self.timeouts += 1
                        verdicts[index] = False
                        continue
                    pred, gold = pairs[index]
                    try:
                        worker.conn.send((gold, pred))
                    except OSError:
                        self._died(lane, verdicts, index)
                        continue
                    busy[number] = (index, worker, time.monotonic() + self.timeout_s)
            if not busy:
                continue
            wait([worker.conn for _, worker, _ in busy.values()],
                 timeout=max(0.0, min(deadline for _, _, deadline in busy.values()) - time.monotonic()))
            for number, (index, worker, deadline) in list(busy.items()):
                lane = self.lanes[number]
                self.slowest_s = max(self.slowest_s, time.monotonic() - (deadline - self.timeout_s))
                try:
                    if worker.conn.poll():
                        verdicts[index] = bool(worker.conn.recv())
                    elif time.monotonic() >= deadline:
                        self.timeouts += 1
                        verdicts[index] = False
                        lane.retire()
                    else:
                        continue
                except (EOFError, OSError):  # the worker died on this input (crash, out of memory)
                    self._died(lane, verdicts, index)
                del busy[number]
        return verdicts

    def _died(self, lane: _Lane, verdicts: list, index: int) -> None:
        self.worker_deaths += 1
        verdicts[index] = False
        lane.retire()
