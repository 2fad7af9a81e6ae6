"""stages.lib.training: which checkpoint a rerun resumes from, and who owns the work directory when
several processes train one model."""

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

