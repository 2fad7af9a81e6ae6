"""Killed stages resume: SIGTERM (a Slurm time limit) to a running GRPO stage's job, Snakemake and its
shell included, saves a checkpoint and stops it; rerunning Snakemake resumes from that checkpoint and ends
exactly where an uninterrupted run ends."""

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

from tests.snakemake_helpers import FAST, REPO, TINY, merged, write_config

TARGET = "results/tiny/r1_zero"
# Long enough to be caught mid-way; no periodic checkpoints, so the only one is the signal's.
CONFIG = merged(merged(TINY, FAST), {"r1_zero": {"max_steps": 30, "save_steps": 1000, "logging_steps": 1}})
TIMING_KEYS = ("step_time",)


def snakemake_command(directory: Path, config_path: Path) -> list[str]:
    return ["snakemake", TARGET, "-s", str(REPO / "Snakefile"), "-d", str(directory), "--cores", "2",
            "--configfile", str(config_path)]


def stage_process(directory: Path) -> int | None:
    """The GRPO stage's process among this test's processes (identified by its working directory)."""
    done = subprocess.run(["pgrep", "-f", "stages.grpo .*--stage r1_zero"], capture_output=True, text=True)
    for pid in map(int, done.stdout.split()):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if os.readlink(f"/proc/{pid}/cwd") == str(directory) and argv[1:3] == [b"-m", b"stages.grpo"]:
                return pid  # the Python process itself, not the shell Snakemake started it from
        except OSError:
            continue
    return None


def logged_steps(log: Path) -> int:
    """Steps the stage has logged (stages.lib.training.ProgressLog: one `step N/M | …` line each)."""
    return sum(line.startswith("step ") for line in log.read_text().splitlines()) if log.exists() else 0


def training_rows(directory: Path) -> list[dict]:
    rows = [json.loads(line) for line in (directory / TARGET / "metrics.jsonl").open()]
    return [{k: v for k, v in row.items() if k not in TIMING_KEYS} for row in rows if "reward" in row]


def test_sigterm_at_a_random_step_then_rerun_ends_like_an_uninterrupted_run(tmp_path, venv_env):
    env = dict(venv_env, PYTHONUNBUFFERED="1")  # the stage's log shows each step as it happens
    whole, interrupted = tmp_path / "whole", tmp_path / "interrupted"
    for directory in (whole, interrupted):
        directory.mkdir()
    subprocess.run(snakemake_command(whole, write_config(whole, CONFIG)), env=env, check=True, capture_output=True)

    config_path = write_config(interrupted, CONFIG)
    # the data and base model first, so the kill lands in GRPO, not in pre-training
    subprocess.run(snakemake_command(interrupted, config_path)[:1] + ["results/tiny/base"]
                   + snakemake_command(interrupted, config_path)[2:], env=env, check=True, capture_output=True)
    kill_after = random.Random().randint(3, 20)
    # Its own session: the job step. Slurm's time-limit signal reaches every process of the step at once
    # (Snakemake, the rule's shell, the stage), and when the step's task (Snakemake) ends, proctrack/cgroup
    # kills whatever is left of it: a stage still saving would lose its checkpoint (gpu-path-audit-4, F3).
    run = subprocess.Popen(snakemake_command(interrupted, config_path), env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, start_new_session=True)
    log = interrupted / "results" / "tiny" / "logs" / "r1_zero.log"
    deadline = time.time() + 300
    while logged_steps(log) < kill_after and run.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert stage_process(interrupted) is not None and run.poll() is None, \
        f"the stage was not running at step {kill_after}"
    os.killpg(run.pid, signal.SIGTERM)
    output = run.communicate(timeout=300)[0]
    outlived = stage_process(interrupted)
    try:
        os.killpg(run.pid, signal.SIGKILL)  # the step's end
    except ProcessLookupError:
        pass  # nothing was left
    assert outlived is None, "the stage outlived its job's Snakemake: Slurm would kill it there, mid-save"
    assert run.returncode != 0, output
    first_log = log.read_text()
    assert "received SIGTERM" in first_log and "stopped at step" in first_log
    stopped_at = int(first_log.split("stopped at step ")[1].split()[0])
    assert 0 < stopped_at < 30
    assert (interrupted / "results" / "tiny" / ".work" / "r1_zero" / f"checkpoint-{stopped_at}"
            / "trainer_state.json").exists()
    assert not (interrupted / TARGET).exists()

    subprocess.run(snakemake_command(interrupted, config_path), env=env, check=True, capture_output=True)
    assert f"resuming from results/tiny/.work/r1_zero/checkpoint-{stopped_at}" in log.read_text()
    assert training_rows(interrupted) == training_rows(whole)
    assert (interrupted / TARGET / "model.safetensors").read_bytes() == \
        (whole / TARGET / "model.safetensors").read_bytes()


def sft_run(model_dir, data_dir, out: Path, work: Path) -> dict:
    """Dev1's SFT on the small cold-start set: 120 conversations in batches of 16 are 8 steps an epoch; 2 epochs,
    a checkpoint at the end of each."""
    from stages import sft

    sft.main(["--model_path", str(model_dir), "--train_data", str(data_dir / "cold_start.parquet"),
              "--output_dir", str(out), "--work_dir", str(work), "--stage", "cold_start_sft", "--learning_rate",
              "1e-3", "--num_train_epochs", "2", "--per_device_train_batch_size", "16", "--max_length", "256",
              "--logging_steps", "1", "--save_steps", "8"])
    from safetensors.torch import load_file

    return load_file(out / "model.safetensors")


def test_resuming_at_an_epoch_boundary_or_at_the_last_step_ends_as_an_uninterrupted_run(
        tiny_model_dir, small_data_dir, tmp_path):
    """Peers' resumes skipped or replayed data exactly there (verl#7401, open-instruct#1523/#1823)."""
    import shutil

    import torch

    whole = sft_run(tiny_model_dir, small_data_dir, tmp_path / "whole", tmp_path / "whole.work")
    assert sorted(p.name for p in (tmp_path / "whole.work").glob("checkpoint-*")) == ["checkpoint-16", "checkpoint-8"]
    for kept in ("checkpoint-8", "checkpoint-16"):  # the end of epoch 1; the last step, before publication
        work = tmp_path / f"from-{kept}.work"
        shutil.copytree(tmp_path / "whole.work", work)
        for checkpoint in work.glob("checkpoint-*"):
            if checkpoint.name != kept:
                shutil.rmtree(checkpoint)
        resumed = sft_run(tiny_model_dir, small_data_dir, tmp_path / f"from-{kept}", work)
        assert resumed.keys() == whole.keys()
        assert all(torch.equal(resumed[name], whole[name]) for name in whole), kept
        history = [json.loads(line) for line in (tmp_path / f"from-{kept}" / "metrics.jsonl").open()]
        assert max(row["step"] for row in history if "loss" in row) == 16


def test_a_training_that_ends_short_of_its_last_step_is_not_published():
    """A resume that trained nothing (or stopped early without a signal) fails instead of passing as done."""
    from types import SimpleNamespace

    import pytest

    from stages.lib.training import StopOnSignal

    stop = StopOnSignal()
    trainer = SimpleNamespace(state=SimpleNamespace(global_step=8, max_steps=16), args=SimpleNamespace(output_dir="w"))
    with pytest.raises(RuntimeError, match="training ended at step 8 of 16 with no stop signal"):
        stop.exit_unless_done(trainer)
    stop.exit_unless_done(SimpleNamespace(state=SimpleNamespace(global_step=16, max_steps=16)))  # done
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def test_a_work_dir_that_a_live_process_still_trains_in_is_refused(tmp_path, monkeypatch):
    """A controller that died leaves its jobs running; the next controller's trainer must not write the same
    checkpoints (NeMo-RL#1624's kind of silent replay)."""
    import pytest

    from stages.lib.training import OWNER, claim_work_dir, process_started

    work, fingerprint = tmp_path / "stage.work", {"config": {"lr": 1}}
    work.mkdir()
    orphan = subprocess.Popen(["sleep", "60"])
    (work / OWNER).write_text(json.dumps({"host": os.uname().nodename, "pid": orphan.pid,
                                          "started": process_started(orphan.pid), "slurm_job_id": ""}))
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    with pytest.raises(RuntimeError, match=rf"is in use by process {orphan.pid} on "):
        claim_work_dir(str(work), fingerprint)
    orphan.kill()
    orphan.wait()
    claim_work_dir(str(work), fingerprint)  # gone: the directory is this run's
    assert json.loads((work / OWNER).read_text())["pid"] == os.getpid()
    # a Slurm job as the owner: tests/test_slurm.py, on the real test cluster


def test_a_slurm_job_s_work_dir_is_guarded_by_its_heartbeat_where_no_slurm_client_can_be_asked(tmp_path, monkeypatch):
    """Inside the GPU image there is no squeue (gpu-path-audit-4, F4): a live job's heartbeat keeps its directory."""
    import threading

    import pytest

    from stages.lib import training
    from stages.lib.training import OWNER, claim_work_dir

    monkeypatch.setattr(training, "HEARTBEAT_S", 0.1)
    monkeypatch.setattr(training, "HEARTBEAT_STALE_S", 0.8)
    monkeypatch.setenv("PATH", str(tmp_path))  # no Slurm client here
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    work, fingerprint = tmp_path / "stage.work", {"config": {"lr": 1}}
    work.mkdir()
    (work / "checkpoint-40").mkdir()
    owner = work / OWNER
    owner.write_text(json.dumps({"host": "gpu-node-7", "pid": 4242, "started": "1", "slurm_job_id": "123456"}))
    stopped = threading.Event()

    def live_job():  # the other job's trainer, still beating
        while not stopped.wait(0.1):
            owner.touch()
    beating = threading.Thread(target=live_job, daemon=True)
    beating.start()
    with pytest.raises(RuntimeError, match=r"in use by Slurm job 123456 \(on gpu-node-7: its heartbeat .* no squeue"):
        claim_work_dir(str(work), fingerprint)
    assert (work / "checkpoint-40").exists()  # nothing deleted
    stopped.set()
    beating.join()
    claim_work_dir(str(work), fingerprint)  # the job died: its heartbeat went stale, the directory is this run's
    assert json.loads(owner.read_text())["pid"] == os.getpid()
