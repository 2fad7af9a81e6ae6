"""Fuzzing the rewards: 10,000 generated completions (random unicode, deep nesting, huge numbers,
broken LaTeX, tag soup) through every reward, alternating the two response formats. No exception
may escape, no call may outlast its time limit, and every score is finite (or None: not applicable).
The symbolic checks' deadline is short here (the fuzz is built to hit it); training uses 5 s."""

import math
import os
import random
import time

import pytest

from stages.lib.rewards.functions import RewardSettings, build_reward_functions
from stages.lib.rewards.registry import RULE_REWARDS
from stages.lib.rewards.sandbox import isolation_problem

pytestmark = pytest.mark.slow  # 10,000 generated completions through every reward

NUM_COMPLETIONS = 10_000
VERIFY_TIMEOUT_S = 0.5
# A call may wait for one symbolic check to be killed, plus a fresh verifier worker's start-up.
TIME_LIMIT_S = VERIFY_TIMEOUT_S + 0.5 + 10.0
SOLUTIONS = ["5", "-3", "\\frac{1}{2}", "x=3", "(1,2]", "\\sqrt{2}", "0.25", "B", "\\{1,2\\}"]
TAGS = ["<think>", "</think>", "<answer>", "</answer>", "\\boxed{", "{", "}", "$", "\\(", "\\)"]
LATEX = ["\\frac{", "\\sqrt[", "^{", "_{", "\\left(", "\\right)", "\\begin{pmatrix}", "\\end{matrix}", "\\int",
         "\\sum_{i=1}^{\\infty}", "\\cdot", "\\times", "&", "\\\\", "\\text{", "\\mathrm{", "\\%", "\\pi", "e^{"]


def random_unicode(rng: random.Random, n: int) -> str:
    planes = [(0x20, 0x7E), (0xA0, 0x2FF), (0x370, 0x3FF), (0x4E00, 0x9FFF), (0x1F300, 0x1FAFF), (0xD800, 0xDFFF),
              (0x0, 0x1F), (0x202A, 0x202E), (0x10FFF0, 0x10FFFF)]
    return "".join(chr(rng.randint(*rng.choice(planes))) for _ in range(n))


def huge_number(rng: random.Random) -> str:
    kind = rng.randrange(4)
    if kind == 0:
        return "9" * rng.randint(50, 20_000)
    if kind == 1:
        return "10^{" * rng.randint(2, 12) + "10" + "}" * rng.randint(0, 12)
    if kind == 2:
        return f"{rng.randint(1, 9)}e{rng.randint(300, 10**9)}"
    return "!" .join(str(rng.randint(100, 10**6)) for _ in range(rng.randint(1, 5))) + "!"


def nested(rng: random.Random) -> str:
    depth = rng.randint(10, 3000)
    opener = rng.choice(["\\frac{", "{", "\\sqrt{", "(", "\\boxed{", "^{"])
    return opener * depth + str(rng.randint(0, 9)) + "}" * rng.randint(0, depth)


def broken_latex(rng: random.Random) -> str:
    return "".join(rng.choice(LATEX + [str(rng.randint(0, 99)), " ", "x", "y"]) for _ in range(rng.randint(1, 60)))


def fragment(rng: random.Random) -> str:
    return rng.choice([random_unicode(rng, rng.randint(0, 200)), huge_number(rng), nested(rng), broken_latex(rng),
                       rng.choice(TAGS) * rng.randint(1, 500), rng.choice(SOLUTIONS)])


def completion(rng: random.Random) -> str:
    """Mostly response-shaped (so answers get extracted and verified), wrapped around junk."""
    answer = fragment(rng)
    shape = rng.randrange(5)
    if shape == 0:
        return (f"<think> {fragment(rng)} </think> <answer> {answer} </answer>"
                f"{fragment(rng) if rng.random() < .3 else ''}")
    if shape == 1:
        return f"<think>\n{fragment(rng)}\n</think>\n\nThe answer is \\boxed{{{answer}}}."
    if shape == 2:
        return f"<answer> \\boxed{{{answer}}} </answer>"
    if shape == 3:
        return "".join(fragment(rng) for _ in range(rng.randint(1, 6)))
    return f"\\boxed{{{answer}}}" * rng.randint(1, 3)


@pytest.fixture(scope="module")
def fuzz():
    rng = random.Random(20261202)
    return [(completion(rng), rng.choice(SOLUTIONS), rng.randint(0, 400)) for _ in range(NUM_COMPLETIONS)]


def test_every_reward_survives_ten_thousand_generated_completions(fuzz):
    names = sorted(RULE_REWARDS)
    if isolation_problem() and os.environ.get("R1_REQUIRE_SANDBOX") != "1":
        names.remove("code")  # needs bubblewrap: tests/test_sandbox.py says so
    functions = {template: build_reward_functions(names, RewardSettings(
        template=template, max_completion_length=256, overlong_buffer=64, verify_timeout_s=VERIFY_TIMEOUT_S))
        for template in ("r1_zero", "chat")}
    slowest = dict.fromkeys(RULE_REWARDS, 0.0)
    for index, (text, solution, num_tokens) in enumerate(fuzz):
        for function in functions["r1_zero" if index % 2 else "chat"]:
            started = time.monotonic()
            (score,) = function(prompts=["p"], completions=[text], completion_ids=[[1] * num_tokens],
                                solution=[solution])
            elapsed = time.monotonic() - started
            slowest[function.__name__] = max(slowest[function.__name__], elapsed)
            assert elapsed < TIME_LIMIT_S, (function.__name__, text[:80])
            assert score is None or (isinstance(score, float) and math.isfinite(score)), (function.__name__, score)
    verifiers = [f.grader.verifier for fs in functions.values() for f in fs if f.__name__ == "accuracy"]
    print(f"slowest call per reward (s): {slowest}; symbolic checks {sum(v.symbolic_calls for v in verifiers)}, "
          f"timeouts {sum(v.timeouts for v in verifiers)}, worker deaths {sum(v.worker_deaths for v in verifiers)}")
