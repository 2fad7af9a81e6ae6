"""Running the workflow from tests: a config derived from tiny.yaml, in a temporary directory."""

import copy
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
TINY = yaml.safe_load((REPO / "configs" / "tiny.yaml").read_text())

# The tiny config cut to seconds: same rules and stages, minutes of training removed.
FAST = {
    "data": {"tiny": {"num_rl_prompts": 100, "num_cold_start": 64, "num_general": 40, "num_eval_math": 20,
                      "num_eval_general": 10, "num_pretrain_docs": 600, "num_preference_pairs": 100,
                      "num_rl_general": 20, "num_rl_code": 30, "num_cold_start_code": 16, "num_eval_code": 10,
                      "num_pretrain_code_docs": 120}},
    "base": {"build": {"vocab_size": 400, "hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128,
                             "block_size": 128, "max_steps": 20, "save_steps": 10, "logging_steps": 5}},
    "cold_start_sft": {"max_steps": 6, "save_steps": 3, "logging_steps": 2},
    "r1_zero": {"max_steps": 2, "num_generations": 2, "questions_per_step": 2, "max_completion_length": 8,
                "save_steps": 1, "logging_steps": 1},
    "reasoning_rl": {"max_steps": 2, "num_generations": 2, "questions_per_step": 2, "max_completion_length": 8,
                     "save_steps": 1, "logging_steps": 1},
    "rejection_sampling": {"num_shards": 2,
                           "generation": {"num_samples": 2, "max_new_tokens": 12, "max_prompts": 12,
                                          "prompts_per_batch": 4},
                           # The seconds-trained model answers nothing right: take what the pool has.
                           "filters": {"allow_shortfall": True},
                           "targets": {"math": 5, "code": 5, "general": 5}},
    "mixture_sft": {"max_steps": 2, "save_steps": 1, "logging_steps": 1},
    "reward_model": {"helpful": {"num_train_epochs": 0.1, "logging_steps": 1},
                      "harmless": {"num_train_epochs": 0.1, "logging_steps": 1}},
    "final_rl": {"max_steps": 2, "num_generations": 2, "questions_per_step": 2, "max_completion_length": 8,
                 "general_phase_fraction": 0.5, "save_steps": 1, "logging_steps": 1},
    "distill": {"students": {"small": {"build": {
        "vocab_size": 400, "hidden_size": 32, "num_hidden_layers": 1,
        "num_attention_heads": 2, "num_key_value_heads": 1,
        "intermediate_size": 64, "block_size": 64, "max_steps": 5, "save_steps": 5, "logging_steps": 1}}},
        "sft": {"max_steps": 2, "save_steps": 1, "logging_steps": 1}},
    "evaluation": {"settings": {"num_samples": 2, "max_new_tokens": 16, "max_prompts": 6}},
}


# The test cluster's site values (tests/slurm/cluster.sh)
PARTITION, ACCOUNT = "cpu", "r1test"


def sacct_jobs(since: str, *jobs: str) -> list[dict]:
    """The test cluster's Slurm jobs since then (allocations only), or the given jobs with their steps."""
    fields = ["JobID", "Comment", "State", "NNodes", "NTasks", "NodeList", "AllocTRES", "ReqCPUS", "Elapsed"]
    which = ["--jobs", ",".join(jobs)] if jobs else ["-X"]
    done = subprocess.run(["sacct", "-n", "-P", *which, "-S", since, "-o", ",".join(fields)], capture_output=True,
                          text=True, check=True)
    return [dict(zip(fields, line.split("|"))) for line in done.stdout.splitlines() if line]


def job_steps(since: str, job_id: str) -> list[dict]:
    """A job's numbered steps (one per srun: `123.0`, `123.1`, not `123.batch`)."""
    return [step for step in sacct_jobs(since, job_id) if step["JobID"].partition(".")[2].isdigit()]


def jobs_by_rule(jobs: list[dict]) -> dict[str, list[dict]]:
    """Snakemake's jobs among sacct's records, by rule (the executor's comment: rule_<name>_wildcards_<...>)."""
    by_rule: dict[str, list[dict]] = {}
    for job in jobs:
        if job["Comment"].startswith("rule_"):
            by_rule.setdefault(job["Comment"].removeprefix("rule_").split("_wildcards")[0], []).append(job)
    return by_rule


def site_profile(profile: dict) -> dict:
    """The shipped Slurm profile with the test cluster's site values, and quicker status checks."""
    site = dict(profile, **{"slurm-init-seconds-before-status-checks": 2, "latency-wait": 5})
    site["default-resources"] = dict(profile["default-resources"], slurm_partition=PARTITION, slurm_account=ACCOUNT)
    site["apptainer-args"] = f"--nv --bind {REPO}:{REPO}:ro"  # the checkout is outside the working directory
    return site


def merged(base: dict, override: dict) -> dict:
    result = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merged(result[key], value)
        else:
            result[key] = value
    return result


def write_config(directory: Path, config: dict) -> Path:
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


# The venv's snakemake by its path, as the README runs it (`.venv/bin/snakemake`): a test's PATH need not
# hold the venv, as a cluster job's does not.
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
# A login shell's PATH on a cluster node: system directories, no venv, no `python`.
CLUSTER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def snakemake(directory: Path, config_path: Path | None, *args, env=None, check=True) -> subprocess.CompletedProcess:
    command = [SNAKEMAKE, *args, "-s", str(REPO / "Snakefile"), "-d", str(directory), "--cores", "2"]
    if config_path is not None:
        command += ["--configfile", str(config_path)]  # last: it takes every value after it
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
    if check and done.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done


def planned_jobs(output: str) -> dict[str, int]:
    """The 'Job stats' table of a dry run: rule -> number of jobs."""
    table = output.split("Job stats:", 1)[1]
    jobs = {}
    for line in table.splitlines():
        match = re.match(r"^([A-Za-z_][\w]*)\s+(\d+)$", line.strip())
        if match and match.group(1) != "total":
            jobs[match.group(1)] = int(match.group(2))
    return jobs


def planned_job_details(output: str) -> list[dict]:
    """Every job of a dry run made with -p: rule, whether it is local, its inputs, resources and shell command."""
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", output)[1:]:
        header = re.match(r"(local)?rule (\w+):", block)
        resources = re.search(r"^\s*resources: (.*)$", block, re.M)
        command = re.search(r"^Shell command: (.*)$", block, re.M)
        wildcards = re.search(r"^\s*wildcards: (.*)$", block, re.M)
        inputs = re.search(r"^\s*input: (.*)$", block, re.M)
        jobs.append({
            "rule": header.group(2), "local": bool(header.group(1)),
            "input": inputs.group(1).split(", ") if inputs else [],
            "resources": dict(item.split("=", 1) for item in resources.group(1).split(", ")) if resources else {},
            "shell": command.group(1) if command else "",
            "wildcards": wildcards.group(1) if wildcards else ""})
    return jobs


FAKE_APPTAINER_DIR = REPO / "tests" / "containers"
IMAGE_PYTHON = "/opt/venv/bin/python"  # the images' interpreter (containers/install.sh)


def apptainer_env(env: dict, log: Path) -> dict:
    """`env` with the stand-in `apptainer` first on PATH, logging its calls to `log` (JSON lines)."""
    return dict(env, PATH=f"{FAKE_APPTAINER_DIR}{os.pathsep}{env['PATH']}", R1_FAKE_APPTAINER_LOG=str(log))
