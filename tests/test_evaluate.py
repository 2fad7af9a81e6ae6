import json
import os
import re

import pytest

from stages import evaluate
from stages.evaluate import IncompleteSamplesError, check_complete, cons_at_k, majority_answer, pass_at_1, score_set
from stages.lib.generation import Sample
from stages.lib.rewards.grading import Grader
from stages.lib.rewards.sandbox import isolation_problem


def test_pass_at_1_is_the_mean_over_prompts_of_the_mean_over_samples():
    correct = [[True, False, False, False], [True, True, True, True], [False] * 4]
    assert pass_at_1(correct) == pytest.approx((0.25 + 1.0 + 0.0) / 3)


def test_cons_at_k_scores_the_majority_answer():
    answers = [["3", "4", "4", None],       # majority 4 (wrong)
               ["7", "7", "8", "8"],         # tie: first seen (7) wins, correct
               [None, None, None, None],     # no answer at all: wrong
               ["6", "5", "5.0", "05"]]      # numbers vote by value: 5 x3 beats 6 x1
    correct = [[True, False, False, False], [True, True, False, False], [False] * 4,
               [False, True, True, True]]
    assert majority_answer(answers[0]) == 1
    assert majority_answer(answers[1]) == 0
    assert majority_answer(answers[2]) is None
    assert majority_answer(answers[3]) == 1
    assert majority_answer(["x+1", "1+x", "x + 1"]) == 0  # text: "x+1" twice
    assert cons_at_k(answers, correct) == pytest.approx(2 / 4)


def test_fewer_than_k_samples_fails_loudly():
    with pytest.raises(IncompleteSamplesError, match=r"p2 \(3/4\)"):
        check_complete([[1, 2, 3, 4], [1, 2, 3]], 4, ["p1", "p2"])


def test_score_set_on_hand_made_completions():
    rows = [{"id": "a", "solution": "4", "level": 1}, {"id": "b", "solution": "10", "level": 2}]
    good = "<think> 2 + 2 = 4. </think> <answer> 4 </answer>"
    samples = [[Sample(good, 12, True), Sample("<think> x </think> <answer> 5 </answer>", 10, True)],
               [Sample("The answer is 10.", 6, True),
                Sample("<think> 5 + 5 = 10. </think> <answer> 10 </answer>", 14, False)]]
    grader = Grader("r1_zero")
    scores, records = score_set(rows, samples, 2, grader)
    grader.close()
    assert scores["pass_at_1"] == pytest.approx((0.5 + 0.5) / 2)
    assert scores["cons_at_2"] == pytest.approx(1.0)  # ties resolve to the first sample: 4 and 10
    assert scores["format_rate"] == pytest.approx(0.75)
    assert scores["mean_length"] == pytest.approx(42 / 4)
    assert scores["truncated_rate"] == pytest.approx(0.25)
    assert scores["pass_at_2"] == 1.0  # each prompt has a correct sample
    assert scores["accuracy_given_format"] == pytest.approx(2 / 3)  # the unformatted "10" is not counted
    assert scores["by_level"] == {"1": {"num_prompts": 1, "pass_at_1": 0.5}, "2": {"num_prompts": 1, "pass_at_1": 0.5}}
    assert [r["correct"] for r in records] == [True, False, False, True]


def test_code_rows_are_graded_by_running_their_program():
    if isolation_problem() and os.environ.get("R1_REQUIRE_SANDBOX") != "1":
        pytest.skip(isolation_problem())
    tests = json.dumps([{"input": "", "output": "11\n"}])
    rows = [{"id": "c", "prompt": "Print 3 + 4 * 2.", "solution": "", "tests": tests, "level": 1},
            {"id": "m", "prompt": "2 + 2?", "solution": "4", "tests": "", "level": 1}]
    program = lambda code: f"<think>\n4 * 2 = 8\n</think>\n\n```python\n{code}\n```"  # noqa: E731
    samples = [[Sample(program("print(3 + 4 * 2)"), 9, True), Sample(program("print((3 + 4) * 2)"), 9, True)],
               [Sample("<think>\n2 + 2 = 4\n</think>\n\n\\boxed{4}", 9, True)] * 2]
    grader = Grader("chat")
    try:
        scores, records = score_set(rows, samples, 2, grader)
    finally:
        grader.close()
    assert [r["correct"] for r in records] == [True, False, True, True]
    assert records[0]["answer"] == "print(3 + 4 * 2)\n"


def test_evaluate_cli_writes_scores_samples_and_manifest(tiny_model_dir, small_data_dir, tmp_path, capsys):
    out = tmp_path / "eval"
    evaluate.main(["--model_path", str(tiny_model_dir), "--template", "r1_zero", "--eval_sets",
                   f"math={small_data_dir / 'eval_math.parquet'}", "--output_dir", str(out), "--num_samples", "3",
                   "--max_new_tokens", "8", "--max_prompts", "5", "--batch_size", "4"])
    # the log shows progress per sampled batch: 15 sequences in batches of 4
    progress = [line for line in capsys.readouterr().out.splitlines()
                if line.startswith("math: ") and "samples (" in line]
    assert [line.split()[1] for line in progress] == ["4/15", "8/15", "12/15", "15/15"]
    assert re.fullmatch(r"math: 15/15 samples \(100%\) \| \d+:\d\d:\d\d elapsed, ETA 0:00:00",
                        progress[-1]), progress[-1]
    scores_file = json.loads((out / "scores.json").read_text())
    scores = scores_file["sets"]["math"]
    assert scores["num_prompts"] == 5 and scores["k"] == 3
    # beside the scores, what makes them comparable with another run's or a paper's
    comparable = scores_file["comparable_by"]
    assert comparable["sets"] == {"math": {"prompts": 5, "samples_per_prompt": 3}}
    assert (comparable["temperature"], comparable["top_p"], comparable["max_new_tokens"]) == (0.6, 0.95, 8)
    assert comparable["math_verify"] and comparable["engine"] and comparable["backend"] == "transformers"
    assert comparable["code_version"] not in ("", "unknown") and comparable["template"] == "r1_zero"
    assert 0 <= scores["pass_at_1"] <= 1 and scores["mean_length"] <= 8
    assert len((out / "samples_math.jsonl").read_text().splitlines()) == 15
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["metrics"]["math"] == scores
    assert not (tmp_path / "eval.partial").exists()


def test_cpu_stages_never_import_vllm_and_backend_flags_reach_the_chosen_backend():
    import subprocess
    import sys

    code = ("import sys, stages.generate, stages.evaluate, stages.grpo; "
            "assert 'vllm' not in sys.modules, 'vllm imported'; "
            "from stages.evaluate import EvaluateConfig; "
            "c = EvaluateConfig(model_path='m', output_dir='o', eval_sets=[], backend='vllm', "
            "vllm_tensor_parallel_size=2, vllm_max_model_len=4096); print(c.backend_kwargs())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "{'tensor_parallel_size': 2, 'gpu_memory_utilization': 0.9, 'max_model_len': 4096}"
    from stages.generate import GenerateConfig

    assert GenerateConfig(model_path="m", prompts="p", output_file="o",
                          batch_size=7).backend_kwargs() == {"batch_size": 7}


def test_a_set_may_take_its_own_number_of_samples(tiny_model_dir, small_data_dir, tmp_path):
    """The field's convention: 64 samples for AIME-sized sets, fewer for large ones, in one job."""
    data = str(small_data_dir / "eval_math.parquet")
    common = ["--model_path", str(tiny_model_dir), "--template", "r1_zero", "--num_samples", "1",
              "--max_new_tokens", "4", "--max_prompts", "3"]
    evaluate.main([*common, "--eval_sets", f"small={data}", f"large={data}", "--output_dir", str(tmp_path / "eval"),
                   "--samples_per_set", '{"small": 4}'])
    scores_file = json.loads((tmp_path / "eval" / "scores.json").read_text())
    assert scores_file["sets"]["small"]["k"] == 4 and scores_file["sets"]["large"]["k"] == 1
    assert scores_file["comparable_by"]["sets"]["small"] == {"prompts": 3, "samples_per_prompt": 4}
    with pytest.raises(ValueError, match=r"--samples_per_set names \['aime'\], which --eval_sets lacks"):
        evaluate.main([*common, "--eval_sets", f"small={data}", "--output_dir", str(tmp_path / "e2"),
                       "--samples_per_set", '{"aime": 64}'])


def test_a_template_that_opens_the_reasoning_is_graded_as_ours_are():
    """R1-Distill's generation prompt ends with `<think>\\n`: its completions hold only `</think>`. The prefill is
    put back, so its format counts and a completion cut mid-reasoning has no answer, as for our models."""
    from stages.lib.generation import ContextBoundGenerator, SamplingSettings
    from stages.lib.templates import CHAT, reasoning_prefill
    from stages.lib.tokenizer import train_tokenizer
    from tests.rehearsal.hub import ASSISTANT, BOS, EOS, R1_DISTILL_TEMPLATE, USER

    tokenizer = train_tokenizer(["What is 2 + 3? The answer is 5."] * 20, 300, chat_template=R1_DISTILL_TEMPLATE,
                                special_tokens={"bos_token": BOS, "eos_token": EOS, "pad_token": EOS,
                                                "additional_special_tokens": [USER, ASSISTANT]})
    prompt = CHAT.render("What is 2 + 3?", tokenizer)
    assert reasoning_prefill(prompt) == "<think>\n" and reasoning_prefill(CHAT.render("x", _chatml())) == ""

    class Canned(ContextBoundGenerator):
        def _generate(self, prompts, settings, on_progress=None):
            return [[Sample("2 + 3 = 5.\n</think>\n\nThe answer is \\boxed{5}.", 20, True),
                     Sample("Maybe \\boxed{5}? Let me check that again, carefully", 30, False)] for _ in prompts]

    generator = Canned()
    generator.tokenizer = tokenizer
    samples = generator.generate([prompt], SamplingSettings(num_samples=2))
    assert all(s.text.startswith("<think>\n") for s in samples[0])
    grader = Grader("chat")
    scores, records = score_set([{"id": "a", "solution": "5", "level": 1}], samples, 2, grader)
    grader.close()
    assert [r["correct"] for r in records] == [True, False]  # the cut one boxed 5 while still reasoning
    assert scores["format_rate"] == 0.5


def _chatml():
    from stages.lib.tokenizer import train_tokenizer

    return train_tokenizer(["What is 2 + 3?"] * 20, 300)


def test_multiple_choice_takes_a_boxed_letter_or_the_answer_line_published_harnesses_read():
    """GPQA's figures come from harnesses reading `Answer: X`; our prompt asks for the letter boxed."""
    from stages.lib.templates import CHOICE_INSTRUCTION

    row = {"id": "q", "level": 0, "solution": "C", "domain": "stem",
           "prompt": f"Which particle carries the electromagnetic force?\n\nA) gluon\nB) W boson\nC) photon\n"
                     f"D) graviton\n\n{CHOICE_INSTRUCTION}"}
    summaries = ["The answer is \\boxed{C}.", "It is the photon.\n\n**Answer:** C", "Answer: B",
                 "Answer: C\n\\boxed{B}", "\\boxed{C} or \\boxed{B}\nAnswer: C", "It is the photon."]
    samples = [[Sample(f"<think>\nphoton\n</think>\n\n{text}", 10, True) for text in summaries]]
    grader = Grader("chat")
    scores, records = score_set([row], samples, len(summaries), grader)
    grader.close()
    assert [r["correct"] for r in records] == [True, True, False, False, False, False]  # a box decides if there is one
    math_row = {**row, "prompt": "What is 1 + 2? Answer in words.", "solution": "3"}
    assert Grader("chat").answer("<think>\nx\n</think>\n\nAnswer: C", math_row) is None  # only for lettered options
