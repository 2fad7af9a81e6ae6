"""Every script in bench/ runs here at a tiny size (seconds), so a change that breaks one fails the
suite; the figures in bench/README.md come from the same scripts at full size."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from stages.lib.rewards.sandbox import isolation_problem
from tests.snakemake_helpers import apptainer_env

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"


def run(venv_env, *command, timeout=600) -> str:
    done = subprocess.run(command, cwd=REPO, env=venv_env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(map(str, command))} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert "command: " in done.stdout  # every benchmark says how to reproduce its figures
    return done.stdout


def test_every_bench_script_is_exercised_here():
    tested = Path(__file__).read_text()
    scripts = sorted(p.name for p in BENCH.iterdir() if p.suffix in (".py", ".sh"))
    assert [name for name in scripts if f'"{name}"' not in tested] == []


def test_rejection_bench_measures_memory_across_pool_sizes(venv_env):
    out = run(venv_env, sys.executable, BENCH / "rejection.py", "--candidates", "300", "900", "--mean_words", "60",
              "--shards", "2", "--samples_per_prompt", "4", "--max_memory_growth", "2")
    assert "at 3.0x the candidates the main process's peak RSS is" in out
    assert "projection to 4,000,000 candidates" in out


def test_code_tests_bench_holds_a_row_group_not_the_set(venv_env):
    out = run(venv_env, sys.executable, BENCH / "code_tests.py", "--rows", "100", "300", "--tests_kb", "40",
              "--max_memory_growth", "1.5")
    assert "at 3.0x the rows the streamed path's peak RSS growth is" in out and "| 300 | 12 MB | whole |" in out


def test_verify_bench(venv_env):
    out = run(venv_env, sys.executable, BENCH / "verify.py", "--pairs", "40", "--time_limit", "2")
    assert "pairs=40" in out and "speed-up" in out


def test_plan_bench(venv_env):
    out = run(venv_env, sys.executable, BENCH / "plan.py", "--shards", "3")
    assert "shards=3 planned_generate_jobs=3" in out


@pytest.mark.skipif(bool(isolation_problem()) and os.environ.get("R1_REQUIRE_SANDBOX") != "1",
                    reason="no sandbox for programs")
def test_code_sandbox_bench(venv_env):
    out = run(venv_env, sys.executable, BENCH / "code_sandbox.py", "--programs", "6", "--sequential_runs", "2")
    assert "6 programs through the code reward" in out


def test_sft_tokens_bench(venv_env):
    out = run(venv_env, sys.executable, BENCH / "sft_tokens.py", "--steps", "2", "--examples", "40", "--rounds", "1",
              "--scale", "256")
    assert "| packing_bfd |" in out


def test_arithmetic_facts_bench(venv_env, tiny_model_dir):
    out = run(venv_env, sys.executable, BENCH / "arithmetic_facts.py", "--model", tiny_model_dir, "--facts", "12")
    assert "all: " in out and "of 12 facts" in out


def test_tiny_bench_script(venv_env, tmp_path):
    """The tiny pipeline's timing script, cut to its first job (the whole DAG is `make tiny`)."""
    out = run(venv_env, "bash", BENCH / "tiny.sh", tmp_path, "--until", "tiny_data")
    assert "whole DAG: " in out and "tiny_data.tsv" in out


def test_gpu_smoke_script_plans_every_stage(venv_env, tmp_path):
    """The GPU smoke check's plan: the rehearsal's 1.5B DAG on one GPU, every job in the GPU image (the
    stand-in apptainer answers the dry run); the run itself needs a GPU (bench/README.md)."""
    env = {**apptainer_env(venv_env, tmp_path / "calls.jsonl"), "R1_REHEARSAL_DIR": str(tmp_path / "smoke")}
    done = subprocess.run(["bash", BENCH / "gpu_smoke.sh", "--dry-run"], cwd=REPO, capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for rule in ("prepare_data", "r1_zero", "cold_start_sft", "reasoning_rl", "generate", "rejection_sampling",
                 "mixture_sft", "reward_model", "final_rl", "distill", "evaluate", "report"):
        assert f"rule {rule}:" in done.stdout, rule
    assert "fetch_model" not in done.stdout  # the models are built at their hub ids
    assert "stages.launch" not in done.stdout and "--backend vllm" in done.stdout  # one process, one GPU
