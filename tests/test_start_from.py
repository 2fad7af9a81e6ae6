"""`start_from`: an artifact the user brings replaces a stage's output, so the stage and everything
only it needed leave the DAG (checked from Snakemake's plan); unusable artifacts fail before any job."""

import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stages.lib.data.schema import SCHEMAS
from stages.lib.start_from import artifact_problems
from tests.snakemake_helpers import FAST, TINY, merged, planned_jobs, snakemake, write_config


@pytest.fixture(scope="module")
def brought(tiny_model_dir, tmp_path_factory):
    """Artifacts from 'elsewhere': a model directory and a mixture, neither with this pipeline's manifest."""
    root = tmp_path_factory.mktemp("brought")
    model = root / "my-dev-model"
    shutil.copytree(tiny_model_dir, model)
    (model / "manifest.json").unlink(missing_ok=True)
    mixture = root / "my-mixture"
    mixture.mkdir()
    rows = [{"id": "m1", "domain": "math", "messages": [{"role": "user", "content": "1 + 1?"},
                                                         {"role": "assistant",
                                                          "content": "<think>\n1 + 1 = 2\n</think>\n\n\\boxed{2}"}]}]
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMAS["sft"]), mixture / "mixture.parquet")
    return {"model": str(model), "mixture": str(mixture)}


def plan(tmp_path, venv_env, target, start_from, *extra):
    config = write_config(tmp_path, merged(merged(TINY, FAST), {"start_from": start_from}))
    return planned_jobs(snakemake(tmp_path, config, "-n", target, *extra, env=venv_env).stdout)


@pytest.mark.parametrize("stage, target, runs, skipped", [
    # Dev1 brought: reasoning RL runs on it; neither cold-start SFT nor the base model it needed
    ("cold_start_sft", "dev2", {"reasoning_rl", "evaluate"}, {"cold_start_sft", "base"}),
    # Dev2 brought: rejection sampling samples from it; Dev1 and reasoning RL are gone
    ("reasoning_rl", "dev3", {"generate", "rejection_sampling", "mixture_sft"},
     {"cold_start_sft", "reasoning_rl"}),
    # the mixture brought: Dev3 trains on it; no sampling, no Dev2
    ("rejection_sampling", "dev3", {"mixture_sft", "evaluate"}, {"generate", "rejection_sampling", "reasoning_rl"}),
    # Dev3 brought: the final RL starts from it
    ("mixture_sft", "final", {"final_rl", "reward_model", "evaluate"},
     {"mixture_sft", "generate", "rejection_sampling", "reasoning_rl", "cold_start_sft"}),
])
def test_a_brought_artifact_takes_its_stage_and_upstream_out_of_the_plan(tmp_path, venv_env, brought, stage, target,
                                                                          runs, skipped):
    path = brought["mixture"] if stage == "rejection_sampling" else brought["model"]
    jobs = plan(tmp_path, venv_env, target, {stage: path})
    assert runs <= set(jobs), jobs
    assert not skipped & set(jobs), jobs


def test_start_from_on_the_command_line(tmp_path, venv_env, brought):
    config = write_config(tmp_path, merged(TINY, FAST))
    done = snakemake(tmp_path, None, "-n", "dev2", "--configfile", str(config), "--config",
                     f"start_from={{cold_start_sft: {brought['model']}}}", env=venv_env)
    jobs = planned_jobs(done.stdout)
    assert "reasoning_rl" in jobs and "cold_start_sft" not in jobs


def test_the_whole_run_reports_with_brought_artifacts(tmp_path, venv_env, brought):
    jobs = plan(tmp_path, venv_env, "all",
                {"rejection_sampling": brought["mixture"], "reasoning_rl": brought["model"]})
    assert "report" in jobs and "rejection_sampling" not in jobs and "generate" not in jobs


@pytest.mark.parametrize("stage, make, message", [
    ("cold_start_sft", lambda d, b: str(d / "nowhere"), "is not a directory"),
    ("cold_start_sft", lambda d, b: str(d), "no config.json"),
    ("reasoning_rl", lambda d, b: _without(b["model"], d, "model.safetensors"), "no weights"),
    ("mixture_sft", lambda d, b: _without(b["model"], d, "tokenizer.json"), "no tokenizer"),
    ("reward_model_helpful", lambda d, b: b["model"], "not a reward model"),
    ("rejection_sampling", lambda d, b: b["model"], "no mixture.parquet"),
])
def test_unusable_artifacts_are_named_before_any_job(tmp_path, venv_env, brought, stage, make, message):
    path = make(tmp_path, brought)
    assert any(message in problem and f"start_from.{stage}: {path}" in problem
               for problem in artifact_problems(stage, path)), artifact_problems(stage, path)
    config = write_config(tmp_path, merged(merged(TINY, FAST), {"start_from": {stage: path}}))
    done = snakemake(tmp_path, config, "-n", "all", env=venv_env, check=False)
    assert done.returncode != 0 and message in done.stdout + done.stderr
    assert not (tmp_path / "results").exists()


def test_a_mixture_without_the_sft_columns_is_named(tmp_path):
    pq.write_table(pa.table({"id": ["a"], "text": ["x"]}), tmp_path / "mixture.parquet")
    (problem,) = artifact_problems("rejection_sampling", str(tmp_path))
    assert "mixture.parquet lacks column(s) ['domain', 'messages']" in problem


def test_only_stages_with_an_output_can_be_brought(tmp_path, venv_env, brought):
    config = write_config(tmp_path, merged(merged(TINY, FAST), {"start_from": {"cold_start": brought["model"]}}))
    done = snakemake(tmp_path, config, "-n", "all", env=venv_env, check=False)
    assert done.returncode != 0 and "'cold_start' is not one of" in done.stdout + done.stderr


def _without(model, tmp_path, filename):
    copy = tmp_path / "incomplete"
    shutil.copytree(model, copy)
    (copy / filename).unlink()
    return str(copy)


def test_a_brought_model_changed_in_place_reruns_what_reads_it(tmp_path, venv_env, brought):
    """A copy of an earlier run's output carries Snakemake's `.snakemake_timestamp`, which dates the directory and
    never moves when the weights beside it change: the run reads it through a link that is renewed when its
    content changes."""
    import os

    from stages.lib.data.schema import FILES

    model = tmp_path / "dev1-copied-from-a-run"
    shutil.copytree(brought["model"], model)
    (model / ".snakemake_timestamp").touch()
    os.utime(model / ".snakemake_timestamp", (1e9, 1e9))  # the earlier run's date
    config = write_config(tmp_path, merged(merged(TINY, FAST), {"start_from": {"cold_start_sft": str(model)}}))
    for name in FILES:  # the rest of a finished run: its data, Dev2 and Dev2's evaluation
        (tmp_path / "results" / "tiny" / "data").mkdir(parents=True, exist_ok=True)
        (tmp_path / "results" / "tiny" / "data" / f"{name}.parquet").touch()
    (tmp_path / "results" / "tiny" / "data" / "manifest.json").touch()
    (tmp_path / "results" / "tiny" / "eval" / "reasoning_rl").mkdir(parents=True)
    (tmp_path / "results" / "tiny" / "reasoning_rl").mkdir()
    snakemake(tmp_path, config, "--touch", "dev2", env=venv_env)
    (model / "config.json").touch()  # a file's time alone: the content is the same, nothing reruns
    assert "Nothing to be done" in snakemake(tmp_path, config, "-n", "dev2", env=venv_env).stdout
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8] + bytes(8))  # new weights saved in place, the timestamp left
    jobs = planned_jobs(snakemake(tmp_path, config, "-n", "dev2", env=venv_env).stdout)
    assert {"reasoning_rl", "evaluate"} <= set(jobs), jobs
