"""stages.hub_probe against the rehearsal's hub (tests/rehearsal/hub.py): the real configs' sources and
models at their hub ids, with the real sets' shapes; a renamed column, a pool too small for the cold start
and a model without a chat template are each named."""

from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from stages import hub_probe
from stages.lib.config_checks import schema_errors
from stages.lib.hub import pin_revisions
from stages.lib.settings import deep_update
from tests.rehearsal import hub

REPO_CONFIGS = Path(__file__).resolve().parent.parent / "configs"
MATH500 = "HuggingFaceH4/MATH-500/data/test-00000-of-00001.parquet"


@pytest.fixture(scope="module")
def hub_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub")
    hub.build(root)
    return root


def probe(root, monkeypatch, capsys, *overlays):
    monkeypatch.chdir(root)  # the configs name hub ids; the stand-ins are directories of those names here
    files = [REPO_CONFIGS / "qwen2.5-1.5b.yaml"]
    for index, overlay in enumerate(overlays):
        files.append(root / f"overlay-{index}.yaml")
        files[-1].write_text(yaml.safe_dump(overlay))
    code = hub_probe.main(["--configfile", *map(str, files), "--rows", "100"])
    return code, capsys.readouterr().out


def test_the_real_config_reads_what_the_hub_holds(hub_root, monkeypatch, capsys):
    code, out = probe(hub_root, monkeypatch, capsys)
    assert code == 0, out
    assert "evaluation.published.r1distill15b.name_or_path" in out and "opens the reasoning ('<think>\\n')" in out
    assert "fit cold_start_sft.max_length=4096" in out and "1 x gold answer is a placeholder" in out


def test_a_renamed_column_a_small_pool_and_a_missing_template_are_named(hub_root, monkeypatch, capsys, tmp_path):
    table = pq.read_table(hub_root / MATH500)
    pq.write_table(table.rename_columns(["final_answer" if c == "answer" else c for c in table.column_names]),
                   hub_root / MATH500)
    template = hub_root / "Qwen/Qwen2.5-0.5B/chat_template.jinja"
    saved = template.read_text()
    template.unlink()
    try:
        pool = {"data": {"hub": {"sets": {"cold_start": [{"path": "open-r1/OpenR1-Math-220k", "name": "default",
                                                          "fields": {"messages": "messages"}, "max_rows": 5000}]}}}}
        code, out = probe(hub_root, monkeypatch, capsys, pool)
        own = tmp_path / "chatml.jinja"  # the config's chat_template stands in for the missing one
        own.write_text(saved)
        _, with_own = probe(hub_root, monkeypatch, capsys, {"distill": {"students": {"qwen05b": {
            "chat_template": str(own)}}}})
    finally:
        pq.write_table(table, hub_root / MATH500)
        template.write_text(saved)
    assert code == 1
    assert "data.hub.sets.eval_math500: HuggingFaceH4/MATH-500: 50 of the first 50 rows cannot be read (50 x no " \
           "'answer'" in out and "final_answer" in out
    assert "a pool of 5000 rows (max_rows) holds" in out and "raise max_rows to" in out
    assert ("distill.students.qwen05b.name_or_path: Qwen/Qwen2.5-0.5B has no chat template and stage distill renders "
            "chats: set distill.students.qwen05b.chat_template to a Jinja file or tokenizer directory") in out
    assert "qwen05b.name_or_path: Qwen/Qwen2.5-0.5B\n" in with_own and "no chat template" not in with_own


def test_the_probe_writes_the_commits_it_resolved_as_pins_the_run_takes(hub_root, monkeypatch, capsys, tmp_path):
    """The stand-ins are directories (no commit): the hub's answer is replaced by one commit per id."""
    commit_of = {}
    monkeypatch.setattr(hub_probe, "resolved_revision",
                        lambda path, revision, kind: commit_of.setdefault(path, f"{len(commit_of):040x}"))
    pins = tmp_path / "pins.yaml"
    monkeypatch.chdir(hub_root)
    code = hub_probe.main(["--configfile", str(REPO_CONFIGS / "qwen2.5-1.5b.yaml"), "--rows", "20",
                           "--write-pins", str(pins)])
    assert code == 0 and f"commits pinned in {pins}" in capsys.readouterr().out
    written = yaml.safe_load(pins.read_text())["hub_revisions"]
    assert written == commit_of and {"Qwen/Qwen2.5-Math-1.5B", "open-r1/OpenR1-Math-220k"} <= set(written)
    config = pin_revisions(deep_update(yaml.safe_load((REPO_CONFIGS / "qwen2.5-1.5b.yaml").read_text()),
                                       yaml.safe_load(pins.read_text())))
    assert not schema_errors(config)
    assert config["base"]["revision"] == written["Qwen/Qwen2.5-Math-1.5B"]
    assert {source["revision"] for source in config["data"]["hub"]["sets"]["cold_start"]} == \
        {written["open-r1/OpenR1-Math-220k"]}
    site = tmp_path / "site.yaml"  # README step 5 appends the pins to it; its last line may lack a newline
    site.write_text("results_dir: /scratch/me/r1")
    site.write_text(site.read_text() + pins.read_text())
    assert yaml.safe_load(site.read_text()) == {"results_dir": "/scratch/me/r1", "hub_revisions": written}
