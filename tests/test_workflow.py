"""The workflow itself: config validation, the plan, and the tiny DAG end to end through Snakemake."""

import json

import pytest
import torch

from tests.snakemake_helpers import FAST, TINY, merged, planned_jobs, snakemake, write_config

EXPECTED_PLAN = {"all": 1, "tiny_data": 1, "base_model": 2, "r1_zero_grpo": 1, "cold_start_sft": 1, "reasoning_rl": 1,
                 "generate_shard": 4, "rejection_sampling": 1, "mixture_sft": 1, "reward_model": 2, "final_rl": 1,
                 "distill_student": 1, "evaluate": 7, "report": 1}


def test_dry_run_of_the_embedded_tiny_config_lists_the_dag(tmp_path, venv_env):
    done = snakemake(tmp_path, None, "-n", "all", env=venv_env)
    assert planned_jobs(done.stdout) == EXPECTED_PLAN


@pytest.mark.parametrize("override, named", [
    ({"cold_start_sft": {"learnin_rate": 1e-3}}, ["learnin_rate", "cold_start_sft"]),
    ({"seed": "zero"}, ["'zero' is not of type 'integer'", "seed"]),
    ({"evaluation": {"settings": {"num_samples": 0}}}, ["0 is less than the minimum of 1", "num_samples"]),
    ({"evaluation": {"models": ["base", "dev9"]}},
     ["'dev9' is not valid under any of the given schemas", "['evaluation']['models'][1]"]),
    ({"evaluation": {"models": ["base", "distill_big"]}}, ["evaluation.models names distill_big"]),
    ({"evaluation": {"sets": {"model": "eval_math"}}}, ["'model' should not be valid", "sets"]),
    ({"r1_zero": {"reward_weights": [1.0]}}, ["r1_zero.reward_weights has 1 value(s) but r1_zero.rewards names 3"]),
    ({"reasoning_rl": {"num_generations": 3, "questions_per_step": 3, "gradient_accumulation_steps": 2}},
     ["reasoning_rl: questions_per_step x num_generations = 9"]),
    ({"r1_zero": {"loss_type": "ppo"}}, ["'ppo' is not one of", "loss_type"]),
    ({"base_model": {"build": TINY["base_model"]["build"], "name_or_path": "Qwen/Qwen2.5-Math-1.5B"}},
     ["is valid under each of", "base_model"]),
])
def test_a_bad_config_fails_before_any_job_and_names_the_key(tmp_path, venv_env, override, named):
    config = write_config(tmp_path, merged(TINY, override))
    done = snakemake(tmp_path, config, "-n", "all", env=venv_env, check=False)
    assert done.returncode != 0
    message = done.stdout + done.stderr
    for text in named:
        assert text in message, message
    assert not (tmp_path / "results").exists()


def test_a_missing_section_is_named(tmp_path, venv_env):
    config = {k: v for k, v in TINY.items() if k != "cold_start_sft"}
    done = snakemake(tmp_path, write_config(tmp_path, config), "-n", "all", env=venv_env, check=False)
    assert done.returncode != 0 and "'cold_start_sft' is a required property" in done.stdout + done.stderr


def test_the_tiny_dag_runs_end_to_end(tmp_path, venv_env):
    config = write_config(tmp_path, merged(TINY, FAST))
    snakemake(tmp_path, config, "all", env=venv_env)
    run = tmp_path / "results" / "tiny"
    stages = ("base", "r1_zero", "cold_start_sft", "reasoning_rl", "mixture_sft", "final_rl", "distill_small")
    for stage in ("data", "mixture", "student_small", "reward_model_helpful", "reward_model_harmless", *stages, *(f"eval/{s}" for s in stages), "report"):
        manifest = json.loads((run / stage / "manifest.json").read_text())
        assert manifest["code_version"] and manifest["packages"]["torch"] == torch.__version__
    for stage in stages:
        assert (run / stage / "metrics.jsonl").stat().st_size > 0
        assert (run / ".work" / stage).is_dir(), "checkpoints live outside the outputs"
        assert (run / "benchmarks" / f"{stage}.tsv").exists() and (run / "logs" / f"{stage}.log").exists()
    table = (run / "report" / "table.md").read_text()
    for name in ("Base", "R1-Zero", "Dev1 (cold-start SFT)", "Dev2 (reasoning RL)", "Dev3 (SFT on the mixture)",
                 "R1", "Distilled small"):
        assert f"| {name} |" in table
    page = (run / "report" / "report.html").read_text()
    assert page.count('src="data:image/png;base64,') == 3, "one curve per RL stage, embedded"
    assert "SFT mixture (rejection sampling)" in page and "Reward models" in page
    assert "| Dev2 (reasoning RL) vs Dev1 (cold-start SFT) | math |" in table and "Changes between stages" in page
    scores = json.loads((run / "report" / "scores.json").read_text())
    assert scores["cold_start_sft"]["math"]["k"] == 2 and scores["base"]["math"]["num_prompts"] == 6
    assert scores["final_rl"]["code"]["num_prompts"] == 6 and "| code pass_at_1 |" in table  # the code domain's column
    assert not list(run.rglob("*.partial"))
    mixture = json.loads((run / "mixture" / "manifest.json").read_text())["metrics"]
    assert mixture["candidates"] == 12 * 2 == mixture["kept_reasoning"] + sum(mixture["removed"].values())
    assert mixture["selected"]["general"] == 5
    dev3 = json.loads((run / "mixture_sft" / "manifest.json").read_text())
    assert dev3["inputs"]["model"]["path"].endswith("/base"), "Dev3 starts from the base model"
    # Nothing changed: nothing reruns.
    again = snakemake(tmp_path, config, "-n", "all", env=venv_env)
    assert "Nothing to be done" in again.stdout + again.stderr


def test_a_generation_shard_killed_mid_way_finishes_on_rerun_without_loss_or_duplicates(tmp_path, venv_env):
    import os
    import signal
    import subprocess
    import time

    from tests.snakemake_helpers import REPO

    config = merged(TINY, FAST)
    config["rejection_sampling"]["generation"].update({"max_prompts": 200, "prompts_per_batch": 1})
    config_path = write_config(tmp_path, config)
    run = tmp_path / "results" / "tiny"
    snakemake(tmp_path, config_path, "results/tiny/reasoning_rl", env=venv_env)  # targets: relative to -d
    target = "results/tiny/rejection_sampling/shards/shard-0.jsonl"
    shard = tmp_path / target
    work = run / ".work" / "generate" / "shard-0.jsonl"
    command = ["snakemake", target, "-s", str(REPO / "Snakefile"), "-d", str(tmp_path), "--cores", "1",
               "--configfile", str(config_path)]
    job = subprocess.Popen(command, env=venv_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and (not work.exists() or len(work.read_text().splitlines()) < 6):
        time.sleep(0.2)
    os.killpg(job.pid, signal.SIGKILL)  # the whole job, as a node failure would
    job.wait()
    assert not shard.exists(), "killed before the shard finished"
    partial = len(work.read_text().splitlines())
    assert 6 <= partial < 100

    snakemake(tmp_path, config_path, "--unlock", env=venv_env)  # the killed Snakemake left its lock
    snakemake(tmp_path, config_path, target, "--rerun-incomplete", env=venv_env)
    rows = [json.loads(line) for line in shard.read_text().splitlines()]
    keys = [(row["id"], row["sample"]) for row in rows]
    data, sampling = config["data"]["tiny"], config["rejection_sampling"]
    prompts = data["num_rl_prompts"] + data["num_rl_code"]  # all of them: fewer than max_prompts
    per_shard = prompts // sampling["num_shards"] * sampling["generation"]["num_samples"]
    assert len(keys) == len(set(keys)) == per_shard
