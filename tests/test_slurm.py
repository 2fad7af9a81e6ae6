"""The pipeline's Slurm side on a real Slurm: Debian's Slurm with accounting, two emulated nodes with fake GPUs
(tests/slurm/cluster.sh). Needs root and apt to set the cluster up; CI sets R1_REQUIRE_SLURM=1 so a cluster
that does not come up fails the test instead of skipping it. A whole DAG through this cluster, the shipped
profile and the images, checked from `sacct` job by job, is the dress rehearsal's (tests/rehearsal/run.py):
it runs a real config's, where a test here ran the tiny one's too (docs/testing.md)."""

import json
import os
import shutil
import subprocess
import time

import pytest
import yaml

from tests.snakemake_helpers import ACCOUNT, PARTITION, REPO, site_profile

CLUSTER = REPO / "tests" / "slurm" / "cluster.sh"


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
