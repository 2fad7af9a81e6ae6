"""stages.lib.training: which checkpoint a rerun resumes from, and who owns the work directory when
several processes train one model."""

import json
import threading
import time

import pytest

from stages.lib.progress import stamp_matches
from stages.lib.training import claim_work_dir, resume_checkpoint


def _checkpoint(work, step, complete=True):
    path = work / f"checkpoint-{step}"
    path.mkdir(parents=True)
    (path / "model.safetensors").write_text("weights")
    if complete:
        (path / "trainer_state.json").write_text("{}")
    return path


def test_resume_takes_the_newest_complete_checkpoint_and_the_main_process_drops_a_killed_write(tmp_path):
    _checkpoint(tmp_path, 50)
    _checkpoint(tmp_path, 100)
    killed = _checkpoint(tmp_path, 150, complete=False)
    assert resume_checkpoint(str(tmp_path)) == str(tmp_path / "checkpoint-100")
    assert not killed.exists()


def test_a_state_file_cut_off_mid_write_marks_the_checkpoint_incomplete(tmp_path):
    _checkpoint(tmp_path, 100)
    cut = _checkpoint(tmp_path, 200)
    (cut / "trainer_state.json").write_text('{"global_step": 200, "log_hist')
    assert resume_checkpoint(str(tmp_path)) == str(tmp_path / "checkpoint-100")
    assert not cut.exists()


def test_other_processes_pass_a_killed_write_by_without_deleting_it(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    _checkpoint(tmp_path, 100)
    killed = _checkpoint(tmp_path, 150, complete=False)
    assert resume_checkpoint(str(tmp_path)) == str(tmp_path / "checkpoint-100")
    assert killed.exists()  # the main process removes it; two removers would race


def test_no_checkpoint_means_a_fresh_start(tmp_path):
    assert resume_checkpoint(str(tmp_path / "missing")) is None
    _checkpoint(tmp_path, 10, complete=False)
    assert resume_checkpoint(str(tmp_path)) is None


def test_changed_settings_discard_old_progress(tmp_path):
    work = tmp_path / "work"
    claim_work_dir(str(work), {"config": {"lr": 1}})
    _checkpoint(work, 10)
    claim_work_dir(str(work), {"config": {"lr": 1}})
    assert (work / "checkpoint-10").exists()
    claim_work_dir(str(work), {"config": {"lr": 2}})
    assert not (work / "checkpoint-10").exists()


def test_other_processes_wait_for_the_main_process_to_claim_the_work_dir(tmp_path, monkeypatch):
    work, fingerprint = tmp_path / "work", {"config": {"lr": 2}}
    monkeypatch.setenv("RANK", "1")
    claimer = threading.Timer(1.0, _claim_as_main, args=(work, fingerprint))  # the main process, a second later
    claimer.start()
    started = time.time()
    claim_work_dir(str(work), fingerprint)
    assert time.time() - started >= 0.9 and stamp_matches(work / "fingerprint.json", fingerprint)
    with pytest.raises(TimeoutError, match="did not claim"):
        claim_work_dir(str(work), {"config": {"lr": 3}}, wait_s=0.5)


def _claim_as_main(work, fingerprint):
    from stages.lib.training import write_stamp

    work.mkdir(parents=True, exist_ok=True)
    write_stamp(work / "fingerprint.json", fingerprint)



def test_a_manifests_wall_time_counts_the_stage_from_its_process_start(tmp_path, monkeypatch):
    """Not only the publish step (a 516 s training once read 0.01 s): the process's start is the stage's."""
    from stages.lib import artifacts

    monkeypatch.setattr(artifacts, "process_started_at", lambda: time.time() - 100)
    with artifacts.staged_output(tmp_path / "out", "test", {}, {}):
        pass
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert 100 <= manifest["wall_time_s"] < 110
    assert manifest["wall_time_counts"] == "this process, from its start to publishing"
    assert 0 < time.time() - artifacts.process_started_at() < 24 * 3600  # /proc read: this test process's age


def test_a_resumed_stage_adds_the_time_its_checkpoint_recorded(tmp_path, monkeypatch):
    """Each checkpoint records the stage's wall time so far; a rerun resuming from it adds that, and says so."""
    from types import SimpleNamespace

    from stages.lib import artifacts
    from stages.lib.training import WALL_TIME, WallTimeInCheckpoints

    args = SimpleNamespace(output_dir=str(tmp_path))
    monkeypatch.setattr(artifacts, "process_started_at", lambda: time.time() - 300)
    first = WallTimeInCheckpoints()
    first.on_train_begin(args, SimpleNamespace(global_step=0), None)
    (tmp_path / "checkpoint-40").mkdir()
    first.on_save(args, SimpleNamespace(global_step=40, is_world_process_zero=True), None)
    assert 300 <= json.loads((tmp_path / "checkpoint-40" / WALL_TIME).read_text())["wall_time_s"] < 310

    monkeypatch.setattr(artifacts, "process_started_at", lambda: time.time() - 50)  # the rerun, 50 s in
    rerun = WallTimeInCheckpoints()
    rerun.on_train_begin(args, SimpleNamespace(global_step=40), None)
    timed = artifacts.wall_time(rerun.resumed)
    assert 350 <= timed["wall_time_s"] < 360
    assert "plus the earlier attempts' up to checkpoint-40" in timed["wall_time_counts"]
    (tmp_path / "checkpoint-40" / WALL_TIME).unlink()  # a checkpoint saved before wall times were recorded
    rerun.on_train_begin(args, SimpleNamespace(global_step=40), None)
    assert "resumed from checkpoint-40, which recorded no earlier attempts' time" in \
        artifacts.wall_time(rerun.resumed)["wall_time_counts"]
