"""The early stop signal of training jobs: sized to the stage's save, in the sbatch line and the launcher."""

import math

import yaml
from transformers import AutoModelForCausalLM

from stages.lib.save_lead import BYTES_PER_PARAMETER, SLURM_SLACK_S, parameter_count, save_lead_s, step_seconds
from stages.lib.settings import job_wall_hours
from tests.snakemake_helpers import REPO, apptainer_env, planned_job_details, snakemake, write_config


def test_parameters_are_counted_from_the_safetensors_headers(tiny_model_dir):
    assert parameter_count(tiny_model_dir) == AutoModelForCausalLM.from_pretrained(tiny_model_dir).num_parameters()
    assert parameter_count(tiny_model_dir.parent) is None  # no weights there


def test_the_lead_covers_the_step_in_progress_and_the_checkpoint_write():
    # 7B on 2 training nodes at 1 GB/s each: 7e9 x 16 B / 2 GB/s = 56 s, after a 166 s step, plus Slurm's slack
    assert save_lead_s(7_000_000_000, 2, 1.0, 166.0) == 166 + 56 + SLURM_SLACK_S
    assert step_seconds(69, 1500) == 69 * 3600 / 1500


def test_training_jobs_ask_slurm_for_an_early_signal_sized_to_their_save(tmp_path, venv_env, tiny_model_dir):
    """The 1.5B config with a local base model (so the plan can count it): the RL job's sbatch options and its
    launcher's grace are the same lead; jobs that do not checkpoint get no signal."""
    config = yaml.safe_load((REPO / "configs" / "qwen2.5-1.5b.yaml").read_text())
    config["base"] = {"name_or_path": str(tiny_model_dir)}
    env = apptainer_env(dict(venv_env, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1"), tmp_path / "calls.jsonl")
    done = snakemake(tmp_path, write_config(tmp_path, config), "-n", "-p", "r1_zero_branch", "--profile",
                     str(REPO / "profiles" / "slurm"), env=env)
    jobs = {job["rule"]: job for job in planned_job_details(done.stdout)}
    compute = {**config["compute"]["default"], **config["compute"]["r1_zero"]}
    step_s = job_wall_hours(compute) * 3600 / config["r1_zero"]["max_steps"]  # 80 GPU-h over 8 GPUs
    lead = math.ceil(step_s + parameter_count(tiny_model_dir) * BYTES_PER_PARAMETER / 1e9 + SLURM_SLACK_S)
    assert jobs["r1_zero"]["resources"]["slurm_extra"] == f"--signal=TERM@{lead}"
    assert f"--stop_grace_s {lead} --" in jobs["r1_zero"]["shell"]
    assert "slurm_extra" not in jobs["evaluate"]["resources"]
