import time

import pytest

from stages.lib.latex import last_boxed
from stages.lib.rewards.answers import extract_final_answer
from stages.lib.rewards.code import extract_program
from stages.lib.rewards.functions import RewardSettings, build_reward_functions
from stages.lib.rewards.grading import Grader
from stages.lib.rewards.steps import wrong_steps
from stages.lib.rewards.verify import AnswerVerifier, fast_verdict
from stages.lib.templates import CHAT, FORMATS, R1_ZERO, response_format, summary_of


@pytest.mark.parametrize("text, expected", [
    ("so \\boxed{42}.", "42"),
    ("\\boxed{1} then \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),
    ("\\boxed{12", None),
    ("\\boxed{7} and \\boxed{12", "7"),
    ("no answer", None),
])
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


def test_final_answer_per_template():
    assert extract_final_answer("<think> 2 + 2 = 4. </think> <answer> 4 </answer>", R1_ZERO) == "4"
    assert extract_final_answer("<think>\\boxed{5}</think>\n\nThe answer is \\boxed{4}.", CHAT) == "4"
    # A boxed answer inside the reasoning is not the final answer.
    assert extract_final_answer("<think>\\boxed{5}</think>\n\nThe answer is 4.", CHAT) is None
    assert extract_final_answer("<answer></answer>", R1_ZERO) is None
    assert summary_of("<think>a</think>rest") == "rest"


@pytest.mark.parametrize("completion, template, answer", [
    ("<think>x</think>\n\nIt is \\boxed{3} or \\boxed{5}.", "chat", None),  # a hedge is no answer
    ("<think>x</think>\n\n\\boxed{5}, that is \\boxed{ 5 }.", "chat", "5"),  # the same answer twice
    ("<think>\\boxed{3}</think>\n\nSo \\boxed{5}.", "chat", "5"),  # the reasoning may weigh others
    ("<think>x</think> <answer>\\boxed{3} or \\boxed{5}</answer>", "r1_zero", None),
    ("<think>x</think> <answer>3 or 5</answer>", "r1_zero", "3 or 5"),
])
def test_what_real_models_write_hedges(completion, template, answer):
    assert extract_final_answer(completion, FORMATS[template]) == answer


# One box that names several values in words hedges like several boxes (math-verify alone takes the first
# two for 5), unless the gold itself names several values.
HEDGES_IN_WORDS = [
    ("3 \\lor 5", "5", False),
    ("5 \\text{ (not 3)}", "5", False),
    ("not 10, it's 1,000.99", "1000.99", False),
    ("1000.99 \\text{ or } 10", "1000.99", False),
    ("5 \\text{ or } 3", "3, 5", True),  # the gold is a list: math-verify decides
    ("1,000.99", "1000.99", True),  # one number with a thousands separator
    ("5 \\text{ cm}^2", "5", True),  # two numbers, no words between values
]


def test_a_hedge_in_words_is_no_answer():
    verifier = AnswerVerifier(timeout_s=5.0)
    try:
        assert verifier.verify_many([(pred, gold) for pred, gold, _ in HEDGES_IN_WORDS]) == \
            [right for _, _, right in HEDGES_IN_WORDS]
        assert not verifier(extract_final_answer("<think> x </think> <answer> 3 or 5 </answer>", R1_ZERO), "5")
    finally:
        verifier.close()


@pytest.mark.parametrize("completion, ok", [
    ("<think> a </think> <answer> 4 </answer>", True),
    ("<think> a </think> <answer> 4 </answer> trailing text", False),
    ("<think></think> <answer> 4 </answer>", False),
    ("<think> a </think> <answer> 4 </answer><answer> 5 </answer>", False),
    ("<answer> 4 </answer> <think> a </think>", False),
])
def test_r1_zero_format(completion, ok):
    assert R1_ZERO.is_well_formatted(completion) is ok


@pytest.mark.parametrize("completion, ok", [
    ("<think>\n2 + 2 = 4\n</think>\n\nThe answer is \\boxed{4}.", True),
    ("<think>\n2 + 2 = 4\n</think>", False),
    ("<think> </think> summary", False),
    ("<think>a</think> b <think>c</think> d", False),
    ("<think>a</think> <answer>4</answer>", False),
])
def test_think_summary_format(completion, ok):
    assert CHAT.is_well_formatted(completion) is ok


@pytest.mark.parametrize("pred, gold, verdict", [
    ("42", "42", True), ("42.0", "42", True), ("1,000", "1000", True), ("\\frac{1}{2}", "0.5", True),
    ("$7$", "7", True), ("41", "42", False), ("\\sqrt{2}", "2", None),
    # what real models write: a list with a space is not one number, a decimal comma not a thousands separator
    ("32, 349", "32349", None), ("32,349", "32349", True), ("0,111", "111", None), ("0,111", "0.111", None),
    ("-1,000,000", "-1000000", True),
])
def test_fast_path(pred, gold, verdict):
    assert fast_verdict(pred, gold) is verdict


def test_symbolic_path_and_hard_timeout():
    verifier = AnswerVerifier(timeout_s=2.0)
    try:
        assert verifier("\\sqrt{2}", "2^{1/2}")
        assert not verifier("\\sqrt{3}", "2^{1/2}")
        started = time.monotonic()
        assert verifier("999999!", "999998!") is False  # sympy computes both factorials: seconds
        assert time.monotonic() - started < 2.0 + 1.0
        assert verifier.timeouts == 1
        assert verifier("\\sqrt{4}", "2")  # symbolic again: the worker restarted after the kill
        assert verifier(None, "1") is False
    finally:
        verifier.close()


def test_a_worker_that_dies_mid_check_is_a_wrong_answer_and_is_replaced():
    import os
    import signal
    import threading

    verifier = AnswerVerifier(timeout_s=5.0)
    try:
        assert verifier("\\sqrt{4}", "2")  # the worker is up
        pid = verifier.lanes[0].active.process.pid
        threading.Timer(0.3, os.kill, args=(pid, signal.SIGKILL)).start()  # dies while checking a slow one
        assert verifier("999999!", "999998!") is False
        assert verifier.worker_deaths == 1 and verifier.timeouts == 0
        assert verifier("\\sqrt{9}", "3")  # a fresh worker
    finally:
        verifier.close()


def test_runaway_forms_are_wrong_without_evaluation():
    verifier = AnswerVerifier(timeout_s=5.0)
    try:
        started = time.monotonic()
        for attack in ("10^{10^{10^{10}}}", "9^{9^{9^{9^{9}}}}", "10^{10^{10}}", "10^{1000000}", "7!!!!!!", "(5!)!"):
            assert verifier(attack, "42") is False, attack
        assert verifier("10^{10^{10}}", "10^{10^{10}}")  # the gold's own text is still right
        assert time.monotonic() - started < 1.0 and verifier.symbolic_calls == 0
        assert verifier("2^{3^{2}}", "512") and verifier("e^{x^{2}}", "e^{x^2}")  # small towers are evaluated
    finally:
        verifier.close()


def test_a_batch_runs_on_several_workers_in_order_and_each_pair_keeps_its_deadline():
    verifier = AnswerVerifier(timeout_s=2.0, lanes=2)
    try:
        pairs = [("\\sqrt{4}", "2"), ("999999!", "999998!"), ("\\frac{2}{4}", "\\frac{1}{2}"), ("999999!", "1"),
                 ("\\sqrt{3}", "2"), (None, "1"), ("x+1", "1+x")]
        verifier.verify_many([("\\sqrt{4}", "2"), ("\\sqrt{9}", "3")])  # both lanes' workers are up
        started = time.monotonic()
        assert verifier.verify_many(pairs) == [True, False, True, False, False, False, True]
        # the two slow pairs ran side by side: one deadline, not two
        assert time.monotonic() - started < 2 * 2.0 and verifier.timeouts == 2
    finally:
        verifier.close()


def test_lists_and_decimal_commas_are_not_thousands_through_the_whole_verifier():
    verifier = AnswerVerifier(timeout_s=5.0)
    try:
        assert verifier.verify_many([("32, 349", "32349"), ("0,111", "111"), ("32,349", "32349"),
                                     ("32, 349", "32, 349")]) == [False, False, True, True]
    finally:
        verifier.close()


@pytest.mark.parametrize("fmt", [R1_ZERO, CHAT], ids=lambda fmt: fmt.name)
def test_a_format_accepts_the_completions_it_builds(fmt):
    """The tiny data's completions and the rewards' checks come from one object per format."""
    math = fmt.math_completion(["2 + 3 = 5", "5 * 4 = 20"], 20)
    assert fmt.is_well_formatted(math) and fmt.tag_score(math) == 1.0
    assert extract_final_answer(math, fmt) == "20"
    code = fmt.code_completion(["read two numbers", "print their sum"], "print(sum(map(int, input().split())))")
    assert fmt.is_well_formatted(code)
    assert extract_program(code, fmt) == "print(sum(map(int, input().split())))\n"
    other = CHAT if fmt is R1_ZERO else R1_ZERO
    assert not other.is_well_formatted(math) and other.tag_score(math) < 1.0
    assert response_format(fmt.name) is fmt and response_format(fmt) is fmt
    with pytest.raises(ValueError, match="unknown prompt template 'r1'"):
        response_format("r1")


def test_the_rewards_and_the_grader_are_one_judge():
    """GRPO's accuracy reward and rejection sampling / evaluation's grader give the same verdicts: the
    rewards are built on the grader, and accuracy and code share one."""
    accuracy, code = build_reward_functions(["accuracy", "code"], RewardSettings(template="chat"))
    assert accuracy.grader is code.grader
    completions = ["<think>x</think>\n\n\\boxed{4}", "<think>x</think>\n\n\\boxed{5}",
                   "<think>\\boxed{4}</think>\n\n4", "<think>x</think>\n\n\\boxed{1/2}"]
    rows = [{"solution": "4"}, {"solution": "4"}, {"solution": "4"}, {"solution": "0.5"}]
    grader = Grader(CHAT)
    try:
        verdicts = grader.grade_many([grader.answer(c, row) for c, row in zip(completions, rows)], rows)
        scores = accuracy(completions=completions, solution=[row["solution"] for row in rows])
        assert verdicts == [True, False, False, True]
        assert scores == [float(v) for v in verdicts]
        # Rows of another domain are not the accuracy reward's: None, which TRL skips.
        assert accuracy(completions=completions[:2], solution=[None, ""]) == [None, None]
        assert code(completions=completions[:1], solution=["4"]) == [None]
    finally:
        grader.close()
        accuracy.grader.close()


@pytest.mark.parametrize("reasoning, wrong", [
    ("10 - 7 = 3\n3 + 2 = 5", []),
    ("<think> 10 - 7 = 4. 4 - 1 = 3. </think>", ["10 - 7 = 4"]),  # the gold answer through a wrong step
    ("2 + 3 * 4 = 14, and 2 + 3 * 4 = 20", ["2 + 3 * 4 = 20"]),  # operator precedence
    ("3 × 4 = 13 and 12 ÷ 4 = 3", ["3 × 4 = 13"]),
    ("10 / 3 = 3.33 or 3.3 but not 10 / 3 = 3", ["10 / 3 = 3"]),  # a rounded result may be written rounded
    ("5 - 8 = -3. 7 / 0 = 1", ["7 / 0 = 1"]),
    ("10 减 7 等于 4", ["10  -  7  =  4"]),  # the tiny data's Chinese steps
    ("$2 + 3 = 6$", ["2 + 3 = 6"]),
    # symbolic or part of something larger: not checked
    ("x + 2 = 5; 2^3 + 1 = 9; (a + 1) * 2 = 6; a - 2 + 3 = 7; 2 + 3 = 5 + 1 = 6; 2x + 1 = 3", []),
    ("1,000 + 5 = 1,005 and 0.1 + 0.2 = 0.3 and 12 + 5 = 17 apples", []),
])
def test_wrong_steps_are_the_false_computations(reasoning, wrong):
    assert wrong_steps(reasoning) == wrong


def test_the_tiny_data_s_worked_steps_all_hold():
    """The check's premise: a gold solution passes it (as the rejection filter will require)."""
    import random

    from stages.lib.data.arithmetic import make_problem
    rng = random.Random(0)
    for level in (1, 2, 3, 4):
        for _ in range(200):
            problem = make_problem(rng, level)
            for fmt in (CHAT, R1_ZERO):
                assert wrong_steps(fmt.math_completion(problem.worked_steps, problem.answer)) == []
