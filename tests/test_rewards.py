"""Every reward on correct, wrong, malformed and adversarial completions, each within a bounded time."""

import json
import math
import os
import time

import pytest

from stages.lib.rewards.functions import RewardSettings, build_reward_functions
from stages.lib.rewards.language import language_consistency, target_language_share
from stages.lib.rewards.length import soft_overlong_punishment
from stages.lib.rewards.registry import REWARDS as REWARD_NAMES
from stages.lib.rewards.registry import RULE_REWARDS
from stages.lib.rewards.sandbox import isolation_problem
from stages.rewards import main as rewards_cli

R1_ZERO = RewardSettings(template="r1_zero", max_completion_length=64, overlong_buffer=16, verify_timeout_s=2.0)
CHAT = RewardSettings(template="chat", max_completion_length=64, overlong_buffer=16, verify_timeout_s=2.0)
TIME_LIMIT_S = R1_ZERO.verify_timeout_s + 0.5 + 10.0  # + the verifier worker's one-off start-up

ADVERSARIAL = [
    "\\boxed{10^{10^{10^{10}}}}",
    "<think> x </think> <answer> 10^{10^{10^{10^{10}}}} </answer>",
    "<think> x </think> <answer> \\boxed{{{{{{ </answer>",
    "<think> x </think> <answer> }}}}\\boxed{ </answer>",
    "<think> a" + "}" * 5000 + " </think> \\boxed{" + "{" * 5000,
    "<think> x </think> <answer> \\frac{\\frac{\\frac{\\frac{1}{2}}{3}}{4}}{5} </answer>",
    "<think>" + "7 + 8 = 15. " * 9000 + "</think> <answer> 15 </answer>",  # ~100 KB
    "\\boxed{" + "9" * 100_000 + "}",
    "<answer>" * 2000 + "</answer>" * 2000,
    "\\boxed{" * 20000,
    "<answer>" * 20000,
    "<think>" * 20000,
    "\x00\ud800\U0010ffff<think>\u202e</think>",
    "",
    "<think> x </think> <answer> \\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix} </answer>",
    "<think> x </think> <answer> \\int_0^\\infty e^{-x^{x^{x}}} dx </answer>",
]


def _score(name, settings, completions, solutions, completion_ids=None):
    (function,) = build_reward_functions([name], settings)
    ids = completion_ids or [[0] * 10 for _ in completions]
    return function(prompts=["p"] * len(completions), completions=completions, completion_ids=ids,
                    solution=solutions)


def test_accuracy_on_correct_wrong_and_malformed():
    completions = ["<think> 2 + 3 = 5. </think> <answer> 5 </answer>",
                   "<think> 2 + 3 = 6. </think> <answer> 6 </answer>",
                   "<think> 2 + 3 = 5. </think> 5",
                   "<think> x </think> <answer> \\frac{10}{2} </answer>"]
    assert _score("accuracy", R1_ZERO, completions, ["5"] * 4) == [1.0, 0.0, 0.0, 1.0]
    chat = ["<think>\n2 + 3 = 5\n</think>\n\nThe answer is \\boxed{5}.", "<think>\n\\boxed{5}\n</think>\n\nIt is 5."]
    assert _score("accuracy", CHAT, chat, ["5", "5"]) == [1.0, 0.0]


def test_accuracy_compares_with_math_verify_beyond_numbers():
    completions = [f"<think> x </think> <answer> {a} </answer>" for a in
                   ["\\frac{\\sqrt{2}}{2}", "\\{1, 2\\}", "(0, 1]", "x = 5", "50\\%"]]
    golds = ["\\frac{1}{\\sqrt{2}}", "\\{2, 1\\}", "(0, 1]", "5", "\\frac{1}{2}"]
    assert _score("accuracy", R1_ZERO, completions, golds) == [1.0] * 5


def test_accuracy_does_not_apply_to_rows_without_a_solution():
    assert _score("accuracy", R1_ZERO, ["<think> x </think> <answer> 1 </answer>"] * 2, [None, ""]) == [None, None]


def test_format_and_tag_count_resist_the_usual_hacks():
    good = "<think> 2 + 3 = 5. </think> <answer> 5 </answer>"
    hacks = [good + good, "<think></think> <answer> 5 </answer>", good + " and more", "<answer> 5 </answer>",
             "<think> <think> x </think> <answer> 5 </answer>"]
    assert _score("format", R1_ZERO, [good] + hacks, [None] * 6) == [1.0] + [0.0] * 5
    tags = _score("tag_count", R1_ZERO, [good, good + good, "<answer> 5 </answer>"], [None] * 3)
    assert tags == [1.0, 0.0, 0.5]
    chat = _score("tag_count", CHAT, ["<think>\nx\n</think>\n\n\\boxed{5}", "<think>x</think><answer>5</answer>"],
                  [None] * 2)
    assert chat == [1.0, 0.5]


def test_language_consistency_scores_english_chinese_mixing():
    assert language_consistency("<think> two plus three is five </think> five") == 1.0
    assert language_consistency("<think> 2 加 3 等于 5 </think> 5") == 0.0
    assert language_consistency("<think> 2 plus 3 等于 5 </think> answer") == pytest.approx(1 / 3)
    assert language_consistency("<think> 2 + 3 = 5 </think>") == 1.0  # no words: nothing mixed
    assert target_language_share("二加三等于五", "zh") == 1.0
    with pytest.raises(ValueError, match="unsupported target language 'xx'"):
        target_language_share("text", "xx")
    scores = _score("language", CHAT, ["<think>\nadd them\n</think>\n\n5", "<think>\n加\n</think>\n\n5"], [None] * 2)
    assert scores == [1.0, 0.0]


def test_soft_overlong_punishment_follows_dapo():
    assert soft_overlong_punishment(48, 64, 16) == 0.0
    assert soft_overlong_punishment(56, 64, 16) == pytest.approx(-0.5)
    assert soft_overlong_punishment(64, 64, 16) == pytest.approx(-1.0)
    assert soft_overlong_punishment(80, 64, 16) == -1.0
    assert _score("overlong", R1_ZERO, ["a", "b"], [None] * 2, completion_ids=[[1] * 10, [1] * 60]) == [0.0, -0.75]
    with pytest.raises(ValueError, match="overlong buffer"):
        soft_overlong_punishment(1, 64, 0)


@pytest.mark.parametrize("name", sorted(RULE_REWARDS))
@pytest.mark.parametrize("settings", [R1_ZERO, CHAT], ids=["r1_zero", "chat"])
def test_every_reward_survives_adversarial_completions_in_bounded_time(name, settings):
    if name == "code" and isolation_problem() and os.environ.get("R1_REQUIRE_SANDBOX") != "1":
        pytest.skip(isolation_problem())
    (function,) = build_reward_functions([name], settings)
    for completion in ADVERSARIAL:
        started = time.monotonic()
        (score,) = function(prompts=["p"], completions=[completion], completion_ids=[[1] * 70], solution=["5"])
        assert time.monotonic() - started < TIME_LIMIT_S, completion[:60]
        assert score is None or math.isfinite(score)


def test_rl_rewards_read_the_reasoning_a_template_opened_in_the_prompt():
    """A chat template ending its generation prompt with `<think>\n` (R1-Distill's): TRL's completions lack it."""
    prefilled = RewardSettings(**{**CHAT.__dict__, "reasoning_prefill": "<think>\n"})
    done, cut = "2 + 3 = 5\n</think>\n\nThe answer is \\boxed{5}.", "Is it \\boxed{5}? Let me check"
    assert _score("accuracy", prefilled, [done, cut], ["5", "5"]) == [1.0, 0.0]
    assert _score("format", prefilled, [done, [{"role": "assistant", "content": done}]], [None] * 2) == [1.0, 1.0]
    assert _score("accuracy", CHAT, [cut], ["5"]) == [1.0]  # without the prefill: graded on unfinished reasoning


def test_conversational_completions_are_scored_from_their_last_message():
    completion = [{"role": "assistant", "content": "<think>\n2 + 3 = 5\n</think>\n\n\\boxed{5}"}]
    assert _score("accuracy", CHAT, [completion], ["5"]) == [1.0]


def test_unknown_reward_is_named():
    with pytest.raises(ValueError, match=r"unknown rule reward\(s\) \[.acuracy.\]"):
        build_reward_functions(["acuracy"], CHAT)


def test_scoring_cli_scores_good_rows_and_reports_bad_ones_by_line(tmp_path, capsys):
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join([
        json.dumps({"prompt": "p", "completion": "<think> 1 + 1 = 2. </think> <answer> 2 </answer>", "solution": "2"}),
        "{not json",
        json.dumps({"prompt": "p", "completion": "<answer> 3 </answer>"}),
        json.dumps([1, 2]),
        json.dumps({"prompt": "p", "completion": "<think> x </think> <answer> 3 </answer>", "solution": "2"}),
    ]) + "\n")
    out = tmp_path / "out.jsonl"
    status = rewards_cli(["score", "--rewards", "accuracy,format", "--template", "r1_zero",
                          "--input", str(source), "--output", str(out)])
    assert status == 1
    errors = capsys.readouterr().err
    assert f"{source}:2: not JSON" in errors
    assert f"{source}:3: missing field(s) ['solution or tests']" in errors
    assert f"{source}:4: not a JSON object" in errors
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["scores"] for r in rows] == [{"accuracy": 1.0, "format": 1.0}, {"accuracy": 0.0, "format": 1.0}]


OWN_REWARDS = '''
def brevity(prompts, completions, **kwargs):
    """1 for a completion of at most 20 characters, falling to 0 at 100; TRL's reward-function signature."""
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [min(1.0, max(0.0, (100 - len(t)) / 80)) for t in texts]


def says_solution(prompts, completions, solution, **kwargs):
    return [None if s is None else float(s in c) for c, s in zip(completions, solution)]


LIMIT = 100
'''


def test_a_reward_of_ones_own_is_checked_when_the_dag_is_planned(tmp_path, monkeypatch):
    """A file (relative: from where Snakemake runs) or an importable module; each problem one line naming the key."""
    from stages.lib.config_checks import cross_field_errors, schema_errors
    from tests.snakemake_helpers import TINY, merged

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", list(__import__("sys").path))  # a module reference puts the directory on it
    (tmp_path / "mine.py").write_text(OWN_REWARDS)
    (tmp_path / "broken.py").write_text("import a_package_nobody_installed\n")
    (tmp_path / "own.py").write_text(OWN_REWARDS.replace("def brevity", "def accuracy"))
    rewards = ["accuracy", "format", "mine.py:brevity", f"{tmp_path}/mine.py:says_solution"]
    config = merged(TINY, {"r1_zero": {"rewards": rewards, "reward_weights": [1, 1, 0.5, 0.5]}})
    assert not schema_errors(config) and not cross_field_errors(config)

    wrong = ["mine.py:LIMIT", "mine.py:brevty", "broken.py:f", "gone.py:g", "mine:brevity", "own.py:accuracy"]
    config = merged(TINY, {"r1_zero": {"rewards": ["accuracy", "mine.py:brevity", *wrong],
                                       "reward_weights": [1.0] * (2 + len(wrong))}})
    assert not schema_errors(config)
    assert cross_field_errors(config) == [
        "r1_zero.rewards[2]: mine.py:LIMIT: 'LIMIT' in mine.py is not a function (its type: int)",
        "r1_zero.rewards[3]: mine.py:brevty: mine.py has no 'brevty' (it defines ['brevity', 'says_solution'])",
        "r1_zero.rewards[4]: broken.py:f: importing broken.py failed: ModuleNotFoundError: No module named "
        "'a_package_nobody_installed'",
        "r1_zero.rewards[5]: gone.py:g: no file gone.py (a relative path is from the directory Snakemake runs in)",
        "r1_zero.rewards[6]: mine:brevity logs as rewards/brevity/mean, as r1_zero.rewards[1] does: give the "
        "function another name",
        "r1_zero.rewards[7]: own.py:accuracy logs as rewards/accuracy/mean, as r1_zero.rewards[0] does: give the "
        "function another name"]
    config = merged(TINY, {"r1_zero": {"rewards": ["accuracy", "acuracy", "mine.py"]}})
    assert schema_errors(config) == [
        f"r1_zero.rewards[{i}]: {name!r} is not one of {sorted(REWARD_NAMES)} or a reward of your own "
        "(path/to/file.py:function or module:function)" for i, name in [(1, "acuracy"), (2, "mine.py")]]


def test_a_reward_of_ones_own_scores_as_trl_calls_it_and_its_answer_is_checked(tmp_path, monkeypatch, capsys):
    from stages.lib.rewards.external import ExternalReward

    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.py").write_text(OWN_REWARDS + "\ndef one_short(prompts, completions, **kwargs):\n"
                                      "    return [1.0] * (len(completions) - 1)\n")
    brevity = ExternalReward("mine.py:brevity")
    assert brevity.__name__ == "brevity"  # TRL logs rewards/brevity/mean
    conversational = [[{"role": "assistant", "content": "x" * 60}]]
    assert brevity(prompts=["p", "p"], completions=["short", "x" * 200], completion_ids=[[1], [2]]) == [1.0, 0.0]
    assert brevity(prompts=["p"], completions=conversational) == [0.5]
    with pytest.raises(ValueError, match=r"mine.py:one_short returned 1 values for 2 completions: return a list"):
        ExternalReward("mine.py:one_short")(prompts=["p", "p"], completions=["a", "b"])

    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_text(json.dumps({"prompt": "p", "completion": "<answer>42</answer>", "solution": "42"}) + "\n")
    assert rewards_cli(["score", "--rewards", "format,mine.py:says_solution,mine.py:brevity", "--template", "r1_zero",
                        "--input", str(source), "--output", str(out)]) == 0
    assert json.loads(out.read_text())["scores"] == {"format": 0.0, "says_solution": 1.0, "brevity": 1.0}
