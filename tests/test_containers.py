"""The container path, in two honest halves (Apptainer cannot be installed on the test machines):

1. The CPU image's own install steps (containers/install.sh, what cpu.def's %post runs) on a debootstrap
   Debian base: the packages are the pinned ones, and a stage CLI runs inside with bubblewrap.
2. Snakemake's apptainer code path (`--sdm apptainer`) with a stand-in `apptainer`
   (tests/containers/apptainer) that runs `exec IMAGE CMD` with bubblewrap on that root filesystem:
   every job runs inside an image (its manifest names the image's Python), the one its config asks
   for, with the profile's apptainer-args (--nv, binds); a multi-GPU job's launcher starts each task
   in the image itself.

Not proven here: that Apptainer builds the definition files (a real `apptainer build` of cpu.def and
the whole GPU image), SIF images, --nv binding a real driver, the GPU image's packages.
Needs root, apt (debootstrap, bubblewrap) and the package indexes; CI sets R1_REQUIRE_CONTAINERS=1
so a missing piece fails instead of skipping.
"""

import json
import re
import subprocess
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from containers.lock import (
    GPU_REQUIREMENTS,
    LOCK,
    VLLM_CPU_LEFT_OUT,
    VLLM_CPU_LOCK,
    VLLM_CPU_OWN,
    forced_differences,
    normalized,
    pinned,
)
from tests.snakemake_helpers import FAST, IMAGE_PYTHON, REPO, TINY, apptainer_env, merged, snakemake, write_config


def test_the_lock_holds_pyproject_pins():
    """`make lock` was run after the last change to pyproject.toml's requirements."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    wanted = [*pyproject["project"]["dependencies"], *pyproject["project"]["optional-dependencies"]["test"],
              *pyproject["build-system"]["requires"]]
    lock = pinned(LOCK)
    disagreeing = []
    for line in wanted:
        requirement = Requirement(line)
        locked = lock.get(normalized(requirement.name))
        if locked is None or not requirement.specifier.contains(locked, prereleases=True):
            disagreeing.append(f"{line} (lock: {locked})")
    assert not disagreeing, f"pyproject.toml and {LOCK.name} disagree, run `make lock`: {disagreeing}"


def test_cpu_and_gpu_share_every_version_but_the_forced_differences():
    cpu, gpu = pinned(LOCK), pinned(GPU_REQUIREMENTS)
    shared = set(cpu) & set(gpu)
    differing = {name for name in shared if Version(cpu[name]).public != Version(gpu[name]).public}
    assert differing == set(forced_differences()), {name: (cpu[name], gpu[name]) for name in differing}
    for package in ("torch", "transformers", "trl", "accelerate", "datasets", "tokenizers", "huggingface-hub",
                    "safetensors", "math-verify", "sympy", "pyarrow", "pandas"):
        assert package in shared, package


def test_the_vllm_cpu_environment_shares_the_gpu_images_versions():
    """The vLLM tests and the rehearsal test the versions the GPU image runs: vLLM's CPU build at the
    image's vLLM version, and every shared package at the image's version but those its CPU build pins
    (torch's CPU build, setuptools) or Python 3.11 forces (cpu-gpu-differences.txt)."""
    vllm_cpu, gpu = pinned(VLLM_CPU_LOCK), pinned(GPU_REQUIREMENTS)
    assert vllm_cpu["vllm-cpu"] == gpu["vllm"] and vllm_cpu["deepspeed"] == gpu["deepspeed"]
    shared = set(vllm_cpu) & set(gpu)
    differing = {name for name in shared if Version(vllm_cpu[name]).public != Version(gpu[name]).public}
    assert differing <= VLLM_CPU_OWN | set(forced_differences()), differing
    assert not VLLM_CPU_LEFT_OUT & set(vllm_cpu)


def test_the_venv_is_the_lock_exactly():
    """What the tests run with is the lock, nothing more or less: the CPU image installs the same file."""
    lock = pinned(LOCK)
    installed = {normalized(d.metadata["Name"]): d.version for d in metadata.distributions()}
    del installed["pip"], installed["r1-pipeline"]
    assert installed == lock, {name: (lock.get(name), installed.get(name))
                               for name in set(lock) | set(installed) if lock.get(name) != installed.get(name)}


def test_a_requirements_file_that_is_not_pinned_is_refused(tmp_path):
    loose = tmp_path / "requirements.txt"
    loose.write_text("torch==2.13.0  # pinned\nnumpy>=2\n")
    with pytest.raises(ValueError, match=r"requirements.txt:2: 'numpy>=2' is not pinned"):
        pinned(loose)


def test_gpu_requirements_are_fully_pinned_around_the_vllm_trl_supports():
    pins = pinned(GPU_REQUIREMENTS)
    for package in ("torch", "transformers", "trl", "vllm", "deepspeed", "liger-kernel", "accelerate", "datasets",
                    "math-verify", "flashinfer-python"):
        assert package in pins, package
    assert pins["trl"] == metadata.version("trl")
    build = pinned(REPO / "containers" / "requirements-gpu-build.txt")
    assert set(build) == {"flash-attn"}


@pytest.fixture
def env(venv_env, tmp_path):
    return apptainer_env(venv_env, tmp_path / "calls.jsonl")


def test_the_image_holds_the_pinned_packages_and_runs_a_stage(container_rootfs, env, tmp_path):
    list_packages = ("import importlib.metadata as m, json; "
                     "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))")
    versions = subprocess.run(["apptainer", "exec", str(container_rootfs), "python", "-c", list_packages],
                              env=env, capture_output=True, text=True, check=True, cwd=tmp_path)
    in_image = {normalized(name): version for name, version in json.loads(versions.stdout).items()}
    pins = pinned(LOCK)
    assert {name: in_image.get(name) for name in pins} == pins

    rows = [{"prompt": "What is 6*7?", "completion": "<think>6*7=42</think>\nThe answer is \\boxed{42}.",
             "solution": "42"},
            {"prompt": "What is 6*7?", "completion": "<think>hmm</think>\n\\boxed{41}", "solution": "42"}]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    score = ["apptainer", "exec", "--bind", f"{REPO}:{REPO}:ro", str(container_rootfs), "bash", "-c",
             f"cd {tmp_path} && PYTHONPATH={REPO} python -m stages.rewards score --rewards accuracy,format "
             "--input in.jsonl --output out.jsonl && python -c 'import sys; print(sys.executable)'"]
    done = subprocess.run(score, env=env, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == IMAGE_PYTHON
    scored = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [row["scores"]["accuracy"] for row in scored] == [1.0, 0.0]


def test_snakemake_runs_every_job_in_its_image(container_rootfs, env, tmp_path):
    gpu_image = tmp_path / "r1-gpu-standin"  # the same root filesystem under another name: which one a job got
    gpu_image.symlink_to(container_rootfs)
    compute = {"r1_zero": {"gpu": 1}, "cold_start_sft": {"gpu": 2}}  # one GPU job, one multi-GPU launcher job
    containers = {"cpu": str(container_rootfs), "gpu": str(gpu_image)}
    config = merged(merged(TINY, FAST), {"compute": compute, "containers": containers})
    site_args = f"--nv --bind {REPO}:{REPO}:ro"
    done = snakemake(tmp_path, write_config(tmp_path, config), "r1_zero_branch", "dev1", "--sdm", "apptainer",
                     "--apptainer-args", site_args, env=env, check=False)
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-5000:]

    calls = [json.loads(line)["argv"] for line in Path(env["R1_FAKE_APPTAINER_LOG"]).read_text().splitlines()]
    execs = [argv for argv in calls if "exec" in argv]
    jobs = {}
    for argv in execs:
        command = argv[-1]
        module = re.search(r"-m (stages\.[\w.]+)", command) or re.search(r"-m (stages\.[\w.]+)", " ".join(argv))
        jobs.setdefault(module.group(1), []).append(argv)
    expected_images = {"stages.data.tiny": container_rootfs, "stages.base_model": container_rootfs,
                       "stages.grpo": gpu_image, "stages.evaluate": container_rootfs, "stages.sft": gpu_image}
    assert set(jobs) == set(expected_images)
    assert len(jobs["stages.evaluate"]) == 3  # base, r1_zero, cold_start_sft
    for module, argvs in jobs.items():
        for argv in argvs:
            assert str(expected_images[module]) in argv, (module, argv)
            assert argv[argv.index("--home") + 1] == str(tmp_path)
            assert f"{REPO}:{REPO}:ro" in argv and "--nv" in argv  # the profile's apptainer-args, as given
    (sft_task,) = jobs["stages.sft"]
    assert sft_task[sft_task.index(str(gpu_image)) + 1:][:2] == ["accelerate", "launch"]  # the launcher's task

    run = tmp_path / "results" / "tiny"
    for stage in ("base", "r1_zero", "cold_start_sft", "eval/base", "eval/r1_zero", "eval/cold_start_sft"):
        manifest = json.loads((run / stage / "manifest.json").read_text())
        assert manifest["python"].startswith(IMAGE_PYTHON), stage  # accelerate starts python3
        assert manifest["code_version"] != "unknown", stage
