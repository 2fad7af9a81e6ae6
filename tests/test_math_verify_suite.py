"""Our accuracy grading against math-verify's own test suite: each of its public (gold, pred, expected)
cases, graded as the pipeline grades a completion, gets math-verify's verdict, unless a named rule of ours
(RULES) says why we differ on purpose, or the case is a known held-out one (HELD_OUT). The test fails on any
other disagreement, and on a rule or held-out case that no longer explains one.

The cases are read, never copied: from the sdist of the installed math-verify (its wheel leaves its tests out),
which `make math-verify-suite` unpacks once into .cache/ (`make test` and `make test-fast` do it first).

How a case becomes a graded completion:
- The gold is what a dataset stores: a gold that boxes its answer goes through prepare_data's
  `solution_from_boxed` (its last \\boxed{}), one math span ($...$, $$...$$, \\(...\\), \\[...\\]) is unwrapped,
  a worked solution without a box gives what math-verify's extraction finds in it, as an answer column would
  hold; then `gold_answer` checks it as prepare_data does (a row it rejects is no row: wrong).
- The pred is a chat completion's summary (`<think>...</think>` then the summary; the R1 format). A pred that
  boxes is the summary itself: our extraction picks the answer. Otherwise the model boxes its answer: a math
  span's content; a one-line plain text whole, as R1-Zero's bare `<answer>` is graded (this is where a hedge in
  words ends up inside a box); from a worked solution, what math-verify's extraction finds (if nothing, the
  summary is the pred unboxed: no answer).
Which cases: every test function whose parametrize names gold and pred. Both of math-verify's readings are
ours at once (a box is read as LaTeX, else as an expression), so a case written for one of them (`match_types`
["latex"] or ["expr"]) is kept: its verdict is about the values. Left out, as options our grader never sets: a
`precision` other than math-verify's default 6 digits, `strict=False`, `allow_set_relation_comp=True`.
"""

import ast
import importlib.util
import inspect
import re
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from importlib.metadata import version
from pathlib import Path

import pytest

from stages.lib.data.sources import BadRow, gold_answer
from stages.lib.latex import BOXED, boxed_answers
from stages.lib.rewards.answers import MAX_ANSWER_CHARS
from stages.lib.rewards.grading import Grader
from stages.lib.rewards.verify import verify_lanes
from stages.lib.templates import summary_of

REPO = Path(__file__).resolve().parent.parent
SUITE = REPO / ".cache" / f"math-verify-{version('math-verify')}" / "tests"
MAKE_TARGET = "make math-verify-suite"
# The options a case may set (compare_strings' keywords) and the values our grader has: math-verify's defaults
OUR_OPTIONS = {"precision": 6, "strict": True, "allow_set_relation_comp": False}
READINGS = ("latex", "expr")  # match_types, math-verify's default: any non-empty part is ours (docstring)
VERIFY_TIMEOUT_S = 30.0  # verdicts, not speed: no case may time out on a busy machine (the slowest takes ~1.5 s)


@dataclass(frozen=True)
class Case:
    where: str  # module::function
    gold: str
    pred: str
    expected: bool
    readings: tuple[str, ...]


@dataclass(frozen=True)
class Rule:
    name: str
    applies: Callable[[str, str], bool]  # (gold, pred) as the case writes them
    reason: str


# --- reading the suite ---------------------------------------------------------------------------------------

def load_module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def suite_modules() -> list:
    """The suite's test modules. Its other modules import `compare_strings` from `tests.test_all`, which is
    our own `tests` package here: test_all answers that name while they load."""
    if not SUITE.is_dir():
        pytest.fail(f"{SUITE} is missing: run `{MAKE_TARGET}` (it unpacks math-verify's sdist, which holds its tests)")
    shared = load_module(SUITE / "test_all.py", "tests.test_all")
    sys.modules["tests.test_all"] = shared
    try:
        return [shared] + [load_module(path, f"math_verify_suite.{path.stem}")
                           for path in sorted(SUITE.glob("test_*.py")) if path.name != "test_all.py"]
    finally:
        del sys.modules["tests.test_all"]


def call_options(function) -> dict[str, ast.expr]:
    """The keywords the test passes to compare_strings (or verify): a literal, or one of its parameters."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    return {keyword.arg: keyword.value for node in ast.walk(tree) if isinstance(node, ast.Call)
            and getattr(node.func, "id", None) in ("compare_strings", "verify") for keyword in node.keywords}


def suite_cases() -> tuple[list[Case], list[str]]:
    """The cases our grader can take, and a line for each left out."""
    cases, left_out = [], []
    for module in suite_modules():
        for name, function in vars(module).items():
            marks = [mark for mark in getattr(function, "pytestmark", []) if mark.name == "parametrize"]
            argnames = [[arg.strip() for arg in mark.args[0].split(",")] for mark in marks]
            if not name.startswith("test_") or not any({"gold", "pred"} <= set(names) for names in argnames):
                continue
            where = f"{Path(module.__file__).name}::{name}"
            assert len(marks) == 1, f"{where}: several parametrize marks; this test reads one"
            options = call_options(function)
            unknown = set(options) - set(OUR_OPTIONS) - {"match_types"}
            assert not unknown, f"{where} sets {sorted(unknown)}: say whether our grader has that option"
            for values in marks[0].args[1]:
                case = dict(zip(argnames[0], getattr(values, "values", values)))
                chosen = {key: case[value.id] if isinstance(value, ast.Name) else ast.literal_eval(value)
                          for key, value in options.items()}
                readings = tuple(chosen.pop("match_types", READINGS))
                other = {key: value for key, value in chosen.items() if value != OUR_OPTIONS[key]}
                if other or not readings or not set(readings) <= set(READINGS):
                    left_out.append(f"{where}: {case['gold'][:40]!r} vs {case['pred'][:40]!r} ({other or readings})")
                    continue
                expected = case["expected"] if "expected" in case else case["result"]
                cases.append(Case(where, case["gold"], case["pred"], bool(expected), readings))
    return cases, left_out


# --- a case as the pipeline sees it --------------------------------------------------------------------------

MATH_SPAN = re.compile(r"\s*(?:\$\$(.*)\$\$|\$(.*)\$|\\\((.*)\\\)|\\\[(.*)\\\])\s*", re.DOTALL)
MATH_DELIMITER = re.compile(r"(?<!\\)\$|\\\(|\\\[")


def answer_in(text: str, readings: tuple[str, ...]) -> str | None:
    """The answer a text without a box of its own gives: a math span's content, a one-line plain text whole,
    else what math-verify's extraction finds in it (its readings as the case sets them)."""
    span = MATH_SPAN.fullmatch(text)
    if span:
        inner = next(group for group in span.groups() if group is not None)
        if not MATH_DELIMITER.search(inner):
            return inner.strip()
    plain = text.strip()
    if not MATH_DELIMITER.search(plain) and "\n" not in plain and len(plain) <= MAX_ANSWER_CHARS:
        return plain
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    configs = [LatexExtractionConfig() if reading == "latex" else ExprExtractionConfig() for reading in readings]
    found = parse(text, configs)
    return found[1] if len(found) > 1 else None


def stored_gold(gold: str, readings: tuple[str, ...] = READINGS) -> str | None:
    """The gold answer as prepare_data stores it; None when it rejects the row."""
    boxes = BOXED in gold
    try:
        return gold_answer(gold if boxes else answer_in(gold, readings), from_boxed=boxes)
    except BadRow:
        return None


def completion(case: Case) -> str:
    """A chat-format completion whose summary answers with the case's pred."""
    if BOXED in case.pred:
        summary = case.pred
    else:
        answer = answer_in(case.pred, case.readings)
        summary = f"The answer is \\boxed{{{answer}}}." if answer else case.pred
    return f"<think>\nWorking it out.\n</think>\n\n{summary}"


# --- where we differ on purpose ------------------------------------------------------------------------------

def different_boxes(text: str) -> int:
    return len({re.sub(r"\s+", "", answer) for answer in boxed_answers(summary_of(text))})


def numbers_named(text: str) -> set[str]:
    return set(re.findall(r"\d+(?:,\d{3})*(?:\.\d+)?", text))


def plain_value(text: str) -> Fraction | None:
    """An integer, a decimal, a/b or \\frac{a}{b} inside optional $...$; None for anything else."""
    text = re.sub(r"\s+", "", text.strip("$ "))
    fraction = re.fullmatch(r"(-?\d+)/(\d+)|\\[dt]?frac\{(-?\d+)\}\{(\d+)\}", text)
    if fraction:
        numerator, denominator = [group for group in fraction.groups() if group is not None]
        return Fraction(int(numerator), int(denominator))
    return Fraction(text) if re.fullmatch(r"-?\d*\.?\d+", text) else None


def rounds_alike(gold: str, pred: str) -> bool:
    """Two different plain numbers that agree to math-verify's 6 digits."""
    gold_value, pred_value = plain_value(gold), plain_value(pred)
    return None not in (gold_value, pred_value) and gold_value != pred_value \
        and round(gold_value, 6) == round(pred_value, 6)


def digits_apart(text: str) -> bool:
    """A number written with a space, or a comma that is no thousands separator, between its digits."""
    return bool(re.fullmatch(r"-?\d+(?:[ ,]\d+)+", text.strip())) \
        and not re.fullmatch(r"-?[1-9]\d{0,2}(?:,\d{3})+", text.strip())


RULES = [
    Rule("several_boxes", lambda gold, pred: different_boxes(pred) > 1,
         "a completion that boxes several different answers hedges and has none (answers.py one_answer); "
         "math-verify takes the boxes together, or the unboxed 'final answer'"),
    Rule("in_box_hedge", lambda gold, pred: re.search(r"\bnot\b|\bor\b|\\lor", pred) is not None
         and len(numbers_named(pred)) > max(1, len(numbers_named(gold))),
         "one box that names several values around 'not' or 'or' is a hedge, wrong (verify.py is_hedge); "
         "math-verify takes its last value"),
    Rule("exact_numbers", rounds_alike,
         "two plain numbers are equal only when exactly equal (verify.py fast_verdict; docs/stages.md); "
         "math-verify rounds to 6 digits, so 0.0833333333333333 is 1/12 there"),
    Rule("digits_apart", lambda gold, pred: digits_apart(gold) or digits_apart(pred),
         "a space between digits parts two numbers ('1 2' is not 12) and a comma that groups no thousands "
         "parts a list (verify.py normalize, as_number); math-verify's expression reading takes 1 000 for "
         "1000 and 1000,99 for 1000.99"),
    Rule("gold_rejected", lambda gold, pred: stored_gold(gold) is None,
         "prepare_data drops a row whose gold math-verify cannot parse, or whose solution closes no \\boxed{} "
         "or boxes several different answers (sources.py gold_answer; the last box alone would be a one-part "
         "gold): no row, nothing graded"),
]

# Disagreements no rule of ours explains, by (gold, pred), each with what we found: a suspected bug of ours
# stays here until it is fixed (the test then names it stale).
HELD_OUT = {
    ("$1 - \\frac{1}{\\mathrm{e}}$", "$1 + \\frac{1}{\\mathrm{e}}$"):
        "we are right (1 - 1/e is not 1 + 1/e): math-verify's $...$ reading stops at \\mathrm{e}'s brace and "
        "compares 1 with 1; in a box 0.9.0 cannot parse \\frac{1}{\\mathrm{e}} closing it (reads '\\frac{1}{')",
}


def explanation(case: Case) -> str | None:
    if (case.gold, case.pred) in HELD_OUT:
        return "held-out"
    return next((rule.name for rule in RULES if rule.applies(case.gold, case.pred)), None)


def shown(case: Case, ours: bool) -> str:
    return (f"{case.where}: gold {case.gold[:80]!r} pred {case.pred[:80]!r} "
            f"expected {int(case.expected)} ours {int(ours)}")


def test_our_grading_agrees_with_math_verify_s_own_suite():
    cases, left_out = suite_cases()
    assert len(cases) > 100, f"only {len(cases)} cases read from {SUITE}; left out: {left_out}"
    golds = [stored_gold(case.gold, case.readings) for case in cases]
    rows = [{"prompt": "the case's question", "solution": gold or ""} for gold in golds]
    grader = Grader("chat", verify_timeout_s=VERIFY_TIMEOUT_S, lanes=verify_lanes())
    try:
        answers = [grader.answer(completion(case), row) for case, row in zip(cases, rows)]
        ours = grader.grade_many(answers, rows)  # a rejected gold leaves no solution: wrong
    finally:
        grader.close()
    differ = [(case, verdict) for case, verdict in zip(cases, ours) if verdict != case.expected]
    unexplained = [shown(case, verdict) for case, verdict in differ if explanation(case) is None]
    rules_used = {explanation(case) for case, _ in differ}
    pairs = {(case.gold, case.pred) for case, _ in differ}
    stale = [f"rule {rule.name}" for rule in RULES if rule.name not in rules_used]
    stale += [f"held-out {pair}" for pair in HELD_OUT if pair not in pairs]
    report = [f"{len(cases)} cases, {len(differ)} disagree with math-verify's verdict."]
    if unexplained:
        report += ["Unexplained (a grader bug, or a deliberate difference to name in RULES):", *unexplained]
    if stale:
        report += ["Stale: explains no disagreement now (drop it):", *stale]
    assert not unexplained and not stale, "\n".join(report)
