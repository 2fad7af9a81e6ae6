"""The workflow itself: config validation, the plan, and the tiny DAG end to end through Snakemake."""

import json

import pytest
import torch

from stages.lib.data.schema import FILES as TINY_SETS
from tests.snakemake_helpers import FAST, TINY, merged, planned_job_details, planned_jobs, snakemake, write_config

EXPECTED_PLAN = {"all": 1, "tiny_data": 1, "base": 2, "r1_zero": 1, "cold_start_sft": 1, "reasoning_rl": 1,
                 "generate": 4, "rejection_sampling": 1, "mixture_sft": 1, "reward_model": 2, "final_rl": 1,
                 "distill": 1, "evaluate": 8, "report": 1}


def test_dry_run_of_the_embedded_tiny_config_lists_the_dag(tmp_path, venv_env):
    done = snakemake(tmp_path, None, "-n", "-p", "all", env=venv_env)
    assert planned_jobs(done.stdout) == EXPECTED_PLAN
    # the report shows every trained stage, the mixture and both reward models: the tiny config evaluates them all
    (report,) = [job for job in planned_job_details(done.stdout) if job["rule"] == "report"]
    trained = ("r1_zero", "cold_start_sft", "reasoning_rl", "mixture_sft", "reward_model_helpful",
               "reward_model_harmless", "final_rl", "distill_small")
    assert (f" --trained {' '.join(f'results/tiny/{stage}' for stage in trained)} --mixture "
            "results/tiny/rejection_sampling --reward_models results/tiny/reward_model_helpful "
            "results/tiny/reward_model_harmless ") in report["shell"], report["shell"]


def test_a_cold_start_from_r1_zero_s_samples_is_two_jobs_between_r1_zero_and_dev1(tmp_path, venv_env):
    """cold_start_data.source: r1_zero puts R1-Zero's sampling and its filtering before Dev1, which then
    learns their output, not the data's cold-start rows; the two jobs run through the workflow."""
    override = {"cold_start_data": {"source": "r1_zero", "generation": {
        "num_samples": 2, "max_new_tokens": 12, "max_prompts": 6, "prompts_per_batch": 3}}}
    config = write_config(tmp_path, merged(merged(TINY, FAST), override))
    plan = planned_job_details(snakemake(tmp_path, config, "-n", "-p", "dev1", env=venv_env).stdout)
    shell = {job["rule"]: job["shell"] for job in plan}
    assert list(shell) == ["tiny_data", "base", "r1_zero", "cold_start_samples", "cold_start_data",
                           "cold_start_sft", "evaluate", "dev1"]
    assert "--model_path results/tiny/r1_zero " in shell["cold_start_samples"]
    assert "--template r1_zero" in shell["cold_start_samples"] and "--max_prompts 6" in shell["cold_start_samples"]
    assert "--shards results/tiny/cold_start_samples/samples.jsonl" in shell["cold_start_data"]
    assert "general" not in shell["cold_start_data"] and "--targets math=4000 code=800" in shell["cold_start_data"]
    assert "--stage cold_start_data" in shell["cold_start_data"]
    assert "--train_data results/tiny/cold_start_data/mixture.parquet" in shell["cold_start_sft"]
    snakemake(tmp_path, config, "results/tiny/cold_start_data", env=venv_env)
    manifest = json.loads((tmp_path / "results/tiny/cold_start_data/manifest.json").read_text())
    assert manifest["stage"] == "cold_start_data", "one name per stage: the manifest's is its folder's"
    assert manifest["metrics"]["candidates"] == 6 * 2 and "general" not in manifest["metrics"]["available"]

    default = planned_job_details(snakemake(tmp_path, write_config(tmp_path, TINY), "-n", "-p", "dev1",
                                            env=venv_env).stdout)
    assert [job["rule"] for job in default] == ["tiny_data", "base", "cold_start_sft", "evaluate", "dev1"]
    assert "--train_data results/tiny/data/cold_start.parquet" in default[2]["shell"]


def test_a_reward_of_ones_own_is_an_input_of_its_stage(tmp_path, venv_env):
    """Its file, outside the checkout (relative: to where Snakemake runs), is an input of the GRPO rule, so an edit
    reruns the stage; the stage gets the reference."""
    (tmp_path / "my_rewards.py").write_text("def brevity(prompts, completions, **kwargs):\n"
                                            "    return [1.0] * len(completions)\n")
    override = {"r1_zero": {"rewards": ["accuracy", "format", "my_rewards.py:brevity"], "reward_weights": [1, 1, 0.5]}}
    done = snakemake(tmp_path, write_config(tmp_path, merged(TINY, override)), "-n", "-p", "r1_zero", env=venv_env)
    r1_zero = done.stdout.split("rule r1_zero:")[1]
    assert r1_zero.split("input: ")[1].split("\n")[0].split(", ")[-1] == "my_rewards.py"
    assert "--rewards accuracy format my_rewards.py:brevity --reward_weights 1 1 0.5" in r1_zero


@pytest.mark.parametrize("override, named", [
    ({"cold_start_sft": {"learnin_rate": 1e-3}},
     ["cold_start_sft.learnin_rate: unknown key; did you mean 'learning_rate'?"]),
    ({"mixture_sft": {"learning_rate": "3e-5"}},
     ["mixture_sft.learning_rate: '3e-5' is a string to YAML", "write 3.0e-5"]),
    ({"seed": "zero"}, ["seed: 'zero' is not of type 'integer'"]),
    ({"evaluation": {"settings": {"num_samples": 0}}}, ["0 is less than the minimum of 1", "num_samples"]),
    ({"evaluation": {"models": ["base", "dev9"]}}, ["evaluation.models[1]: 'dev9' is not one of ['base', "]),
    ({"evaluation": {"models": ["base", "distill_big"]}}, ["evaluation.models names distill_big"]),
    ({"evaluation": {"models": ["base", "student_big"]}}, ["evaluation.models names student_big"]),
    ({"evaluation": {"sets": {"model": "eval_math"}}}, ["'model' should not be valid", "sets"]),
    ({"r1_zero": {"reward_weights": [1.0]}}, ["r1_zero.reward_weights has 1 value(s) but r1_zero.rewards names 3"]),
    ({"reasoning_rl": {"num_generations": 3, "questions_per_step": 3, "gradient_accumulation_steps": 2}},
     ["reasoning_rl.questions_per_step x num_generations = 9"]),
    ({"r1_zero": {"loss_type": "ppo"}}, ["'ppo' is not one of", "loss_type"]),
    ({"cold_start_data": {"source": "teacher"}}, ["cold_start_data.source: 'teacher' is not one of ['dataset', "]),
    ({"cold_start_data": {"targets": {"general": 5}}}, ["cold_start_data.targets.general: the cold start is"]),
    ({"base": {"build": TINY["base"]["build"], "name_or_path": "Qwen/Qwen2.5-Math-1.5B"}},
     ["base: sets build and name_or_path: choose one (", "base: {build: null}"]),
    # a null removes the key before the checks: the base is now the named model, which must be there
    ({"base": {"build": None, "name_or_path": "/models/none"}},
     ["base.name_or_path: /models/none is not a directory"]),
])
def test_a_bad_config_fails_before_any_job_and_names_the_key(tmp_path, venv_env, override, named):
    config = write_config(tmp_path, merged(TINY, override))
    done = snakemake(tmp_path, config, "-n", "all", env=venv_env, check=False)
    assert done.returncode != 0
    message = done.stdout + done.stderr
    for text in named:
        assert text in message, message
    assert not (tmp_path / "results").exists()


def error_lines(done) -> list[str]:
    """What a user reads of a failed run, less Snakemake's notice of the profiles it reads (every run has it)."""
    return [line for line in (done.stdout + done.stderr).strip().splitlines()
            if not (line.startswith("Using ") and "profile" in line)]


def test_a_config_typo_is_one_short_line_with_the_file_and_a_suggestion(tmp_path, venv_env):
    config = merged(TINY, {"reasoning_rl": {"num_generatons": 4}})
    done = snakemake(tmp_path, write_config(tmp_path, config), "-n", "all", env=venv_env, check=False)
    lines = error_lines(done)
    assert done.returncode != 0 and len(lines) <= 4, lines
    assert "config.yaml" in lines[1] and "reasoning_rl.num_generatons: unknown key; did you mean 'num_generations'?" \
        in lines[2]


def test_a_partial_config_is_told_how_to_layer_itself(tmp_path, venv_env):
    partial = write_config(tmp_path, {"cold_start_sft": {"learning_rate": 3.0e-5}})
    done = snakemake(tmp_path, partial, "-n", "all", env=venv_env, check=False)
    assert done.returncode != 0 and "--configfile configs/tiny.yaml yours.yaml" in done.stdout + done.stderr
    assert len(error_lines(done)) <= 4


def test_a_missing_section_is_named(tmp_path, venv_env):
    config = {k: v for k, v in TINY.items() if k != "cold_start_sft"}
    done = snakemake(tmp_path, write_config(tmp_path, config), "-n", "all", env=venv_env, check=False)
    assert done.returncode != 0 and "cold_start_sft: missing (required" in done.stdout + done.stderr


def test_the_tiny_dag_runs_end_to_end(tmp_path, venv_env):
    config = write_config(tmp_path, merged(TINY, FAST))
    snakemake(tmp_path, config, "all", env=venv_env)
    run = tmp_path / "results" / "tiny"
    stages = ("base", "r1_zero", "cold_start_sft", "reasoning_rl", "mixture_sft", "final_rl", "student_small",
              "distill_small")
    for stage in ("data", "rejection_sampling", "reward_model_helpful", "reward_model_harmless", *stages,
                  *(f"eval/{s}" for s in stages), "report"):
        manifest = json.loads((run / stage / "manifest.json").read_text())
        assert manifest["code_version"] and manifest["packages"]["torch"] == torch.__version__
        if stage in stages or stage.startswith(("rejection_sampling", "reward_model")):
            assert manifest["stage"] == stage, "one name per stage: the manifest's is its folder's"
    for stage in stages:
        assert (run / stage / "metrics.jsonl").stat().st_size > 0
        assert (run / ".work" / stage).is_dir(), "checkpoints live outside the outputs"
        assert (run / "benchmarks" / f"{stage}.tsv").exists() and (run / "logs" / f"{stage}.log").exists()
    table = (run / "report" / "table.md").read_text()
    for name in ("Base", "R1-Zero", "Dev1 (cold-start SFT)", "Dev2 (reasoning RL)", "Dev3 (SFT on the mixture)",
                 "R1", "Distilled small"):
        assert f"| {name} |" in table
    page = (run / "report" / "report.html").read_text()
    assert page.count('src="data:image/png;base64,') == 8, "curves of every training stage, embedded"
    assert "SFT mixture (rejection sampling)" in page and "Reward models" in page
    assert ("| Dev2 (reasoning RL) | Dev1 (cold-start SFT) | 2 prompts x 2 samples a step | accuracy 1, code 1, "
            "format 1, language 1 | 2 |") in table
    assert "| Dev3 (SFT on the mixture) | Base |" in table and \
        "| Distilled small | Student small (undistilled) |" in table
    # two sampled completions with their prompts, and the per-level row
    assert page.count("<td>Dev1 (cold-start SFT)</td><td>math</td>") == 3
    assert f"commit {json.loads((run / 'report' / 'manifest.json').read_text())['code_version']}" in page
    assert "| Dev2 (reasoning RL) vs Dev1 (cold-start SFT) | math |" in table and "Changes between stages" in page
    assert "| Distilled small vs Student small (undistilled) | math |" in table  # distillation, measured
    assert "| Dev1 (cold-start SFT) | math |" in table and "level 1 pass@1" in table and "Per level" in page
    scores = json.loads((run / "report" / "scores.json").read_text())
    assert scores["cold_start_sft"]["math"]["k"] == 2 and scores["base"]["math"]["num_prompts"] == 6
    assert scores["final_rl"]["code"]["num_prompts"] == 6 and "| code pass_at_1 |" in table  # the code domain's column
    assert not list(run.rglob("*.partial"))
    mixture = json.loads((run / "rejection_sampling" / "manifest.json").read_text())["metrics"]
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
    target = "results/tiny/generate/shard-0.jsonl"
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


def test_a_judge_in_the_config_judges_its_domains_in_the_rejection_job(tmp_path, venv_env, tiny_model_dir,
                                                                         small_data_dir):
    """rejection_sampling.judge from a config file to the job: the data and Dev2's shards are in place
    (well-formatted samples a seconds-trained Dev2 could not write), so the rejection job alone runs."""
    import shutil

    config = merged(TINY, FAST)
    config["start_from"] = {"reasoning_rl": str(tiny_model_dir)}
    config["rejection_sampling"]["targets"] = {"math": 2, "general": 2}
    config["rejection_sampling"]["judge"] = {"name_or_path": str(tiny_model_dir), "domains": ["math"],
                                             "batch_size": 2, "max_new_tokens": 4}
    config_path = write_config(tmp_path, config)
    run = tmp_path / "results" / "tiny"
    shutil.copytree(small_data_dir, run / "data")
    (run / "data" / "manifest.json").write_text("{}")
    good = "<think>\n2 + 3 = 5\n</think>\n\nThe answer is \\boxed{5}."
    # the first plan links the brought Dev2 into the run (start_from/): the shards are sampled after it
    snakemake(tmp_path, config_path, "-n", "results/tiny/rejection_sampling", env=venv_env)
    for shard in range(config["rejection_sampling"]["num_shards"]):
        path = run / "generate" / f"shard-{shard}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps({"id": f"p{shard}-{i}", "sample": 0, "prompt": "2 + 3?", "solution": "5",
                                            "domain": "math", "completion": good}) + "\n" for i in range(3)))
    plan = snakemake(tmp_path, config_path, "-n", "-p", "results/tiny/rejection_sampling", "--rerun-triggers", "mtime",
                     env=venv_env)
    assert planned_jobs(plan.stdout) == {"rejection_sampling": 1}
    assert f"--judge_model {tiny_model_dir} --judge_domains math --judge_batch_size 2" in plan.stdout

    snakemake(tmp_path, config_path, "results/tiny/rejection_sampling", "--rerun-triggers", "mtime", env=venv_env)
    metrics = json.loads((run / "rejection_sampling" / "manifest.json").read_text())["metrics"]
    assert metrics["judged"]["candidates"] == 6
    assert sum(metrics["judged"][k] for k in ("correct", "incorrect", "not_judged")) == 6
    assert len((run / ".work" / "rejection_sampling" / "judged.jsonl").read_text().splitlines()) == 1 + 6


def test_a_hub_judge_is_fetched_once_like_the_base_model(tmp_path, venv_env):
    config = merged(TINY, FAST)
    config["rejection_sampling"]["judge"] = {"name_or_path": "Qwen/Qwen2.5-72B-Instruct", "domains": ["math"],
                                             "backend": "vllm"}
    plan = snakemake(tmp_path, write_config(tmp_path, config), "-n", "-p", "results/tiny/rejection_sampling",
                     env=venv_env)
    assert planned_jobs(plan.stdout)["fetch_model"] == 1
    assert "--name_or_path Qwen/Qwen2.5-72B-Instruct" in plan.stdout
    assert "--judge_model results/tiny/judge --judge_domains math --judge_backend vllm" in plan.stdout


def test_jobs_run_the_workflows_own_interpreter_whatever_the_callers_path(tmp_path, venv_env):
    """The README's `.venv/bin/snakemake ...` from a shell whose PATH lacks the venv (never activated)."""
    import subprocess
    import sys
    from pathlib import Path

    from tests.snakemake_helpers import REPO

    config = write_config(tmp_path, merged(TINY, FAST))
    done = subprocess.run([str(Path(sys.executable).parent / "snakemake"), "results/tiny/data/manifest.json",
                           "-s", str(REPO / "Snakefile"), "-d", str(tmp_path), "--cores", "1", "--configfile",
                           str(config)], env={**venv_env, "PATH": "/usr/bin:/bin"}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "results" / "tiny" / "data" / "rl_prompts.parquet").exists()


def test_a_tiny_run_takes_one_set_from_a_local_file_and_reruns_what_reads_it_when_the_file_changes(
        tmp_path, venv_env):
    """data.hub.sets beside data.tiny: the listed set is prepared from its source, the rest generated; the target
    prepares only what it reads; the source file is the preparation's input, so an edit reruns it."""
    import os

    mine = tmp_path / "mydata" / "my_rl.jsonl"
    mine.parent.mkdir()
    mine.write_text(json.dumps({"question": "Ben has 2 pens and gets 1 more. How many pens?", "answer": "3"}) + "\n")
    overlay = {"data": {"hub": {"sets": {"rl_prompts": [
        {"path": "mydata/my_rl.jsonl", "fields": {"prompt": "question", "solution": "answer"}}]}}}}
    config = write_config(tmp_path, merged(TINY, overlay))
    plan = snakemake(tmp_path, config, "-n", "-p", "r1_zero_branch", env=venv_env).stdout
    assert planned_jobs(plan) == {"tiny_data": 1, "prepare_data": 1, "base": 1, "r1_zero": 1, "evaluate": 2,
                                  "r1_zero_branch": 1}
    shell = {job["rule"]: job["shell"] for job in planned_job_details(plan)}
    assert ("--sets cold_start general eval_math eval_code eval_general pretrain preferences_helpful "
            "preferences_harmless rl_general >") in shell["tiny_data"]
    assert "--eval_data results/tiny/data/eval_math.parquet" in shell["prepare_data"]  # decontaminated against them
    assert "--train_data results/tiny/prepare_data/rl_prompts/rl_prompts.parquet " in shell["r1_zero"]

    run = tmp_path / "results" / "tiny"  # every data file made before the source was edited
    made = [run / "data" / f"{name}.parquet" for name in TINY_SETS if name != "rl_prompts"]
    made += [run / "data" / "manifest.json"] + [run / "prepare_data" / "rl_prompts" / name for name in (
        "rl_prompts.parquet", "rl_prompts.rejects.jsonl", "manifest.json")]
    for path in made:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
        os.utime(path, (1, 1))
    again = snakemake(tmp_path, config, "-n", "results/tiny/prepare_data/rl_prompts/manifest.json", env=venv_env)
    assert planned_jobs(again.stdout) == {"prepare_data": 1}
    assert "reason: Updated input files: mydata/my_rl.jsonl" in again.stdout

def test_the_report_covers_what_the_config_evaluates(tmp_path, venv_env):
    """evaluation.models [base, r1_zero]: the report needs the R1-Zero branch alone, and shows what it trained."""
    config = write_config(tmp_path, merged(TINY, {"evaluation": {"models": ["base", "r1_zero"]}}))
    plan = planned_job_details(snakemake(tmp_path, config, "-n", "-p", "report", env=venv_env).stdout)
    assert sorted(job["rule"] for job in plan) == ["base", "evaluate", "evaluate", "r1_zero", "report", "tiny_data"]
    (report,) = [job for job in plan if job["rule"] == "report"]
    assert " --trained results/tiny/r1_zero --published " in report["shell"], report["shell"]  # no mixture, no RMs
