import json

import pytest

from stages.report import (
    change_rows,
    evaluation_setting_rows,
    level_rows,
    mixture_rows,
    paired_change,
    published_rows,
    report_code_digest,
)
from tests.snakemake_helpers import REPO


def test_paired_change_pairs_prompts_and_gives_the_standard_error_of_the_differences():
    before = {"a": 0.0, "b": 0.5, "c": 1.0}
    after = {"a": 0.5, "b": 0.5, "c": 1.0, "only_after": 0.0}
    mean_before, mean_after, change, se = paired_change(before, after)
    assert (mean_before, mean_after) == pytest.approx((0.5, 2 / 3))
    assert change == pytest.approx(1 / 6)
    assert se == pytest.approx(1 / 6)  # differences 0.5, 0, 0: sd 0.2887, over sqrt(3)
    with pytest.raises(ValueError, match="share no prompt"):
        paired_change({"a": 1.0}, {"b": 1.0})


def write_samples(directory, correct_by_prompt):
    directory.mkdir(parents=True)
    lines = [json.dumps({"id": prompt, "sample": i, "correct": c})
             for prompt, samples in correct_by_prompt.items() for i, c in enumerate(samples)]
    (directory / "samples_math.jsonl").write_text("\n".join(lines) + "\n")


def test_each_model_is_compared_with_the_model_it_follows_when_both_were_evaluated(tmp_path):
    # the evaluations are found where the rule says they are (NAME=DIR), whatever the folders are called
    evals = {"base": tmp_path / "a", "r1_zero": tmp_path / "b" / "c", "reasoning_rl": tmp_path / "d"}
    write_samples(evals["base"], {"p1": [False, False], "p2": [True, False]})
    write_samples(evals["r1_zero"], {"p1": [True, False], "p2": [True, True]})
    write_samples(evals["reasoning_rl"], {"p1": [True, True], "p2": [True, True]})
    header, rows = change_rows(evals)
    assert len(header) == len(rows[0])
    assert rows == [["R1-Zero vs Base", "math", "0.250", "0.750", "+0.500", "0.000", "–"]]


def test_the_mixture_table_adds_up_in_both_blocks(tmp_path):
    """Candidates = removals + kept; the mixture = selected reasoning rows + general rows, not sampled."""
    metrics = {"candidates": 100, "removed": {"incorrect": 60, "format": 10}, "kept_reasoning": 30,
               "selected": {"math": 20, "code": 5, "general": 8}, "total": 33}
    (tmp_path / "manifest.json").write_text(json.dumps({"metrics": metrics}))
    _, rows = mixture_rows(tmp_path)
    counts = {label.strip(): int(count) for label, count in rows}
    assert counts["candidates sampled from Dev2"] == sum(
        n for label, n in counts.items() if label.startswith("removed:")) + counts["kept (passed every filter)"]
    assert counts["kept (passed every filter)"] == counts["selected: math"] + counts["selected: code"] + counts[
        "not selected (domain target reached)"]
    assert counts["= mixture total"] == counts["mixture: selected reasoning rows"] + counts[
        "+ general rows (non-reasoning set, not sampled)"] == 33


def test_the_readme_screenshot_shows_the_current_report():
    """docs/report.png is remade whenever the report's code changes (make tiny, then make screenshot)."""
    stamp = json.loads((REPO / "docs" / "report.png.json").read_text())
    assert stamp["report_code"] == report_code_digest(), (
        "stages/report.py or stages/lib/plots.py changed since docs/report.png was taken: run `make tiny` and "
        "`make screenshot`, and update the README's table from the same run")


def test_per_level_rows_show_why_pass_at_1_moved():
    scores = {"base": {"math": {"k": 4, "pass_at_4": 0.5, "accuracy_given_format": None,
                                "by_level": {"1": {"pass_at_1": 0.25}, "10": {"pass_at_1": 0.0}}}},
              "cold_start_sft": {"math": {"k": 4, "pass_at_4": 0.75, "accuracy_given_format": 0.6,
                                          "by_level": {"2": {"pass_at_1": 0.5}}},
                                 "general": {"k": 4}}}  # a set without levels has no row
    header, rows = level_rows(scores)
    assert header[2:] == ["pass@k", "accuracy given format", "level 1 pass@1", "level 2 pass@1", "level 10 pass@1"]
    assert rows == [["Base", "math", "0.500 (k=4)", "–", "0.250", "–", "0.000"],
                    ["Dev1 (cold-start SFT)", "math", "0.750 (k=4)", "0.600", "–", "0.500", "–"]]


def write_evaluation(directory, config, metrics, packages=None):
    directory.mkdir(parents=True)
    manifest = {"stage": "evaluate", "config": config, "metrics": metrics, "code_version": "abc1234",
                "packages": packages or {"vllm": "0.31.0", "transformers": "5.17.0", "math-verify": "0.9.0"}}
    (directory / "manifest.json").write_text(json.dumps(manifest))


def test_the_report_says_what_makes_each_number_comparable_and_sets_published_figures_beside_ours(tmp_path):
    settings = {"backend": "vllm", "temperature": 0.6, "top_p": 0.95, "max_new_tokens": 3072}
    evals = {"final_rl": tmp_path / "final_rl", "published_r1distill15b": tmp_path / "published"}
    write_evaluation(evals["final_rl"], settings, {"aime24": {"num_prompts": 30, "k": 64, "pass_at_1": 0.1},
                                                   "math500": {"num_prompts": 500, "k": 16, "pass_at_1": 0.6}})
    write_evaluation(evals["published_r1distill15b"], settings,
                     {"aime24": {"num_prompts": 30, "k": 64, "pass_at_1": 0.2734},
                      "math500": {"num_prompts": 500, "k": 16, "pass_at_1": 0.8}})
    header, rows = evaluation_setting_rows(evals)
    assert dict(zip(header, rows[0])) == {
        "model": "R1", "sets: prompts x samples": "aime24 30 x 64, math500 500 x 16", "temperature": "0.6",
        "top-p": "0.95", "max new tokens": "3072", "engine": "vllm 0.31.0", "answer check": "math-verify 0.9.0",
        "commit": "abc1234"}
    published = {"published_r1distill15b": {"name_or_path": "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
                                            "reported": {"aime24": 28.9, "gpqa": 33.8, "math500": 83.9},
                                            "source": "Table 5",
                                            "harness": {"num_samples": 64, "max_new_tokens": 32768, "top_p": 0.95},
                                            "notes": {"gpqa": "theirs: an Answer: X line"}}}
    header, rows = published_rows(evals, published)
    assert header[-2] == "differences from their evaluation"
    assert [row[2:] for row in rows] == [
        ["aime24", "27.3 (k=64)", "28.9", "max new tokens 3072 (theirs 32768)", "Table 5"],
        ["gpqa", "–", "33.8", "max new tokens 3072 (theirs 32768); theirs: an Answer: X line", "Table 5"],
        ["math500", "80.0 (k=16)", "83.9", "samples 16 (theirs 64); max new tokens 3072 (theirs 32768)", "Table 5"]]
    published["published_r1distill15b"]["harness"] = {"max_new_tokens": 3072}
    assert published_rows(evals, published)[1][0][-2] == "none known"


def test_rl_curves_plot_the_train_inference_log_prob_gap_when_trl_logs_it():
    """TRL logs how far vLLM's and the trainer's log-probabilities of the sampled tokens are apart (with vLLM)."""
    from stages.lib.plots import curves_figure

    history = [{"step": step, "reward": 0.5, "rewards/accuracy/mean": 0.4, "rewards/format/mean": 0.9,
                "sampling/sampling_logp_difference/mean": 0.01 * step, "sampling/sampling_logp_difference/max": 0.3}
               for step in (1, 2, 3)]
    axes = {axis.get_title(): axis for axis in curves_figure(history, "R1-Zero").axes if axis.get_title()}
    gap = axes["train-inference log-prob gap (vLLM vs trainer)"]
    assert [line.get_label() for line in gap.get_lines()] == ["mean", "max"]
    assert [line.get_label() for line in axes["accuracy / code / format"].get_lines()] == ["accuracy", "format"]
    without = curves_figure([{k: v for k, v in row.items() if not k.startswith("sampling/")} for row in history], "x")
    assert "train-inference log-prob gap (vLLM vs trainer)" not in [axis.get_title() for axis in without.axes]


def test_every_reward_a_stage_used_is_plotted_and_listed_with_its_weight(tmp_path):
    """Rewards no fixed panel names (a user's own, tag_count) share a panel after the rewards' panels."""
    from stages.lib.plots import curves_figure
    from stages.report import trained_stage_rows

    history = [{"step": step, "reward": 1.0, "rewards/accuracy/mean": 0.4, "rewards/format/mean": 0.9,
                "rewards/brevity/mean": 0.1 * step, "rewards/brevity/std": 0.1, "rewards/tag_count/mean": 0.5,
                "completions/mean_length": 20} for step in (1, 2, 3)]
    titles = [axis.get_title() for axis in curves_figure(history, "R1-Zero").axes if axis.get_title()]
    assert titles == ["reward (weighted sum of the stage's rewards)", "accuracy / code / format",
                      "brevity / tag_count", "mean completion length (tokens)"]
    axis = next(axis for axis in curves_figure(history, "x").axes if axis.get_title() == "brevity / tag_count")
    assert [line.get_label() for line in axis.get_lines()] == ["brevity", "tag_count"]
    assert list(axis.get_lines()[0].get_ydata()) == pytest.approx([0.1, 0.2, 0.3])

    stage = tmp_path / "r1_zero"
    stage.mkdir()
    config = {"rewards": ["accuracy", "format", "/home/me/mine.py:brevity"], "reward_weights": [1.0, 1.0, 0.5],
              "questions_per_step": 2, "num_generations": 4, "learning_rate": 1e-4}
    (stage / "manifest.json").write_text(json.dumps({
        "stage": "r1_zero", "inputs": {"model": {"path": "results/tiny/base"}}, "config": config,
        "code_version": "abc1234", "wall_time_s": 60, "metrics": {}}))
    header, rows = trained_stage_rows([stage])
    assert dict(zip(header, rows[0]))["rewards (weight)"] == "accuracy 1, format 1, /home/me/mine.py:brevity 0.5"
