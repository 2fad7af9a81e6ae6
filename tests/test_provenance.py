"""What a manifest says about the code that made it: a dirty checkout's changes are stored as a patch that
`git apply` takes, and every manifest written from that checkout names the patch and its sha256."""

import json
import subprocess

import pytest

from stages.lib import artifacts


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture
def dirty_checkout(tmp_path, monkeypatch):
    """A checkout with a tracked change, an untracked stage module and an untracked file outside the code."""
    repo = tmp_path / "checkout"
    (repo / "stages").mkdir(parents=True)
    (repo / "stages" / "rewards.py").write_text("WEIGHT = 1\n")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start")
    (repo / "stages" / "rewards.py").write_text("WEIGHT = 2\n")
    (repo / "stages" / "my_reward.py").write_text("def cites_step(completions, **kwargs): ...\n")
    (repo / "notes.txt").write_text("not code\n")
    monkeypatch.setattr(artifacts, "CHECKOUT", repo)
    monkeypatch.delenv("R1_CODE_VERSION", raising=False)
    monkeypatch.delenv("R1_CODE_PATCH", raising=False)
    return repo


def test_a_dirty_checkouts_patch_holds_its_changes_and_names_its_untracked_code(dirty_checkout, tmp_path):
    path, text = artifacts.code_patch_file(tmp_path / "run")
    assert path.parent == tmp_path / "run" / "code" and path.name.startswith(git(dirty_checkout, "describe",
                                                                                  "--always").strip() + "-dirty-")
    digest = artifacts.file_digest(dirty_checkout / "stages" / "my_reward.py")
    assert f"# untracked: stages/my_reward.py sha256 {digest}\n" in text and "notes.txt" not in text
    artifacts.write_once(path, text)
    assert path.read_text() == text and not path.with_name(path.name + ".partial").exists()
    # git apply takes it (the preamble aside) on a clean copy of the commit
    clean = tmp_path / "clean"
    subprocess.run(["git", "clone", "-q", str(dirty_checkout), str(clean)], check=True)
    git(clean, "apply", str(path))
    assert (clean / "stages" / "rewards.py").read_text() == "WEIGHT = 2\n"


def test_manifests_name_the_patch_of_a_dirty_code_version(dirty_checkout, tmp_path, monkeypatch):
    # a stage run by hand writes the patch beside its manifest
    with artifacts.staged_output(tmp_path / "by_hand", "test", {}, {}):
        pass
    manifest = json.loads((tmp_path / "by_hand" / "manifest.json").read_text())
    assert manifest["code_version"].endswith("-dirty")
    assert manifest["code_patch"] == {"path": str(tmp_path / "by_hand" / "code.patch"),
                                      "sha256": artifacts.file_digest(tmp_path / "by_hand" / "code.patch")}
    assert "WEIGHT = 2" in (tmp_path / "by_hand" / "code.patch").read_text()
    # a workflow job names the run's patch
    patch = tmp_path / "run" / "code" / "abc1234-dirty-0123456789ab.patch"
    artifacts.write_once(patch, "diff\n")
    monkeypatch.setenv("R1_CODE_VERSION", "abc1234-dirty")
    monkeypatch.setenv("R1_CODE_PATCH", str(patch))
    with artifacts.staged_output(tmp_path / "job", "test", {}, {}):
        pass
    manifest = json.loads((tmp_path / "job" / "manifest.json").read_text())
    assert manifest["code_patch"] == {"path": str(patch), "sha256": artifacts.file_digest(patch)}
    assert not (tmp_path / "job" / "code.patch").exists()
    # a clean checkout's manifest has none
    monkeypatch.setenv("R1_CODE_VERSION", "abc1234")
    with artifacts.staged_output(tmp_path / "clean", "test", {}, {}):
        pass
    assert "code_patch" not in json.loads((tmp_path / "clean" / "manifest.json").read_text())


def test_an_input_read_through_a_link_records_where_it_links_to(tmp_path):
    """A brought artifact is read through the run's link (start_from.link_brought): the manifest and the model
    card keep the user's own path."""
    from stages.lib.start_from import link_brought

    mine = tmp_path / "my-dev1"
    mine.mkdir()
    (mine / "config.json").write_text("{}")
    link = link_brought(str(mine), tmp_path / "run" / "start_from" / "cold_start_sft")
    with artifacts.staged_output(tmp_path / "dev2", "reasoning_rl", {}, {"model": link}) as (scratch, _):
        (scratch / "config.json").write_text("{}")
    model = json.loads((tmp_path / "dev2" / "manifest.json").read_text())["inputs"]["model"]
    assert model["path"] == link and model["links_to"] == str(mine)
    assert f"- model: `{link}` → `{mine}` (sha256 " in (tmp_path / "dev2" / "README.md").read_text()
