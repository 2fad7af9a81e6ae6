"""The pipeline on a real Slurm: Debian's Slurm with accounting, two emulated nodes with fake GPUs
(tests/slurm/cluster.sh), driven by `snakemake --profile` with the official executor plugin. Needs root and
apt to set the cluster up; CI sets R1_REQUIRE_SLURM=1 so a cluster that does not come up fails the test
instead of skipping it. The whole DAG through this cluster, checked job by job, is the dress rehearsal's
(tests/rehearsal/run.py), on the real 1.5B config; here, what only the tiny config has: its base model
built as a Slurm job (README's first cluster run) and a 2-node SFT on CPU nodes (gloo, no accelerate config)."""

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.snakemake_helpers import (
    ACCOUNT,
    CLUSTER_PATH,
    FAST,
    IMAGE_PYTHON,
    PARTITION,
    REPO,
    TINY,
    apptainer_env,
    job_steps,
    jobs_by_rule,
    merged,
    planned_jobs,
    sacct_jobs,
    site_profile,
    snakemake,
    write_config,
)

CLUSTER = REPO / "tests" / "slurm" / "cluster.sh"
LOCAL_RULES = {"tiny_data", "dev1"}
# The fast tiny cut to Dev1, with a 2-node SFT on CPU nodes and an evaluation of two CPUs.
SLURM_COMPUTE = {
    "default": {"cpus_per_task": 1, "mem_mb": 1500, "runtime": 30},
    "cold_start_sft": {"nodes": 2, "cpus_per_task": 1, "mem_mb": 2000},
    "evaluate": {"cpus_per_task": 2, "mem_mb": 1000},
}


def slurm_is_up() -> bool:
    return shutil.which("sinfo") is not None and subprocess.run(
        ["sinfo", "-h", "-t", "idle,mix,alloc", "-o", "%D"], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def cluster():
    started = False
    if not slurm_is_up():
        required = os.environ.get("R1_REQUIRE_SLURM") == "1"
        if os.geteuid() != 0 and not required:
            pytest.skip("no Slurm here and not root: tests/slurm/cluster.sh cannot set one up")
        done = subprocess.run(["bash", str(CLUSTER), "up"], capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            message = f"tests/slurm/cluster.sh up failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            pytest.fail(message) if required else pytest.skip(message)
        started = True
    yield
    if started:
        subprocess.run(["bash", str(CLUSTER), "down"], capture_output=True, timeout=120)


def test_profile_is_the_users_with_site_values_only():
    """The test runs the shipped profile: it changes only what the profile marks as site-specific."""
    profile = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())
    assert profile["executor"] == "slurm" and profile["retries"] >= 1
    assert set(site_profile(profile)) == set(profile) | {"latency-wait"}


def test_the_tiny_dag_to_dev1_runs_as_slurm_jobs_in_the_cpu_image(cluster, container_rootfs, tmp_path, venv_env):
    """The shipped profile with the test cluster's site values; the stand-in `apptainer` (tests/containers) on
    the CPU image's root filesystem; Snakemake by its path with a PATH that holds no venv, as on a cluster."""
    profile_dir = tmp_path / "profile"
    profile_dir.mkdir()
    profile = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())
    (profile_dir / "config.yaml").write_text(yaml.safe_dump(site_profile(profile)))
    containers = {"cpu": str(container_rootfs), "gpu": str(container_rootfs)}
    config_path = write_config(tmp_path, merged(merged(TINY, FAST), {"compute": SLURM_COMPUTE,
                                                                     "containers": containers}))
    plan = planned_jobs(snakemake(tmp_path, config_path, "-n", "dev1", env=venv_env).stdout)
    env = apptainer_env(dict(venv_env, PATH=CLUSTER_PATH), tmp_path / "apptainer-calls.jsonl")
    assert shutil.which("python", path=env["PATH"]) is None

    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 5))
    done = snakemake(tmp_path, config_path, "dev1", "--profile", str(profile_dir), env=env, check=False)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-6000:]

    ran = jobs_by_rule(sacct_jobs(since))
    # every job completed the first time (a failed one would pass unseen: the profile's retries rerun it)
    failed = [(rule, job["JobID"], job["State"]) for rule, jobs in ran.items() for job in jobs
              if job["State"] != "COMPLETED"]
    assert not failed, f"Slurm jobs that failed (see the slurmd logs in /var/tmp/r1-slurm/log): {failed}"
    # every non-local rule ran as Slurm jobs, as many as planned (the base model's build too); local rules did not
    assert {rule: len(js) for rule, js in ran.items()} == {r: n for r, n in plan.items() if r not in LOCAL_RULES}
    assert ran.keys() >= {"base", "cold_start_sft", "evaluate"}

    (sft,) = ran["cold_start_sft"]
    assert sft["NNodes"] == "2"
    steps = job_steps(since, sft["JobID"])
    assert sorted(step["NodeList"] for step in steps) == ["n1", "n2"]  # one launcher task per node
    assert all(step["NTasks"] == "1" for step in steps)
    assert all(job["ReqCPUS"] == "2" for job in ran["evaluate"])

    # the 2-node SFT's launcher put each node's task (accelerate, no config: gloo over CPU nodes) in the CPU image
    calls = [json.loads(line)["argv"] for line in Path(env["R1_FAKE_APPTAINER_LOG"]).read_text().splitlines()]
    sft_tasks = [argv for argv in calls if "stages.sft" in argv and "--stage" in argv and "cold_start_sft" in argv]
    assert len(sft_tasks) == 2 and all(str(container_rootfs) in argv for argv in sft_tasks)
    manifests = list((tmp_path / "results" / "tiny").glob("**/manifest.json"))
    assert len(manifests) >= 4
    assert {json.loads(m.read_text())["python"].removesuffix("3") for m in manifests} == {IMAGE_PYTHON}


def test_a_work_dir_whose_slurm_job_still_runs_is_refused(cluster, tmp_path, monkeypatch):
    """An orphan of a dead controller: the job that claimed a stage's work directory still runs on the cluster;
    the next trainer refuses the directory until the job has ended (squeue no longer lists it active)."""
    from stages.lib.training import OWNER, claim_work_dir

    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    job = subprocess.run(["sbatch", "--parsable", "--partition", PARTITION, "--account", ACCOUNT, "--time", "5",
                          "--output", "/dev/null", "--wrap", "sleep 300"], capture_output=True, text=True,
                         check=True).stdout.strip().split(";")[0]
    work, fingerprint = tmp_path / "stage.work", {"config": {"lr": 1}}
    work.mkdir()
    (work / OWNER).write_text(json.dumps({"host": "n1", "pid": 1, "started": "1", "slurm_job_id": job}))
    try:
        with pytest.raises(RuntimeError, match=rf"in use by Slurm job {job} \((pending|running)\).*`scancel {job}`"):
            claim_work_dir(str(work), fingerprint)
    finally:
        subprocess.run(["scancel", job], check=True)
    deadline = time.time() + 60
    while subprocess.run(["squeue", "--noheader", "--jobs", job], capture_output=True, text=True).stdout.strip() \
            and time.time() < deadline:
        time.sleep(1)
    claim_work_dir(str(work), fingerprint)  # ended: the directory is this run's
    assert json.loads((work / OWNER).read_text())["slurm_job_id"] == ""
