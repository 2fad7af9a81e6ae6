"""The one progress log (stages/lib/progress.py) that generation shards and rejection sampling resume from."""

import json

from stages.lib.progress import ProgressLog


def records(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()[1:]]


def test_a_rerun_with_the_same_fingerprint_keeps_what_was_written_whole_and_appends_after_it(tmp_path):
    path = tmp_path / "progress.jsonl"
    log = ProgressLog(path, {"seed": 0})
    log.append([{"n": 0}, {"n": 1}, {"n": "ü"}], sync=True)
    log.close()
    with open(path, "a") as f:
        f.write('{"n": 3')  # torn by a kill
    again = ProgressLog(path, {"seed": 0})
    assert again.resumed and list(again.replay()) == [{"n": 0}, {"n": 1}, {"n": "ü"}]
    again.append([{"n": 3}])
    assert records(path) == [{"n": 0}, {"n": 1}, {"n": "ü"}, {"n": 3}]
    again.copy_records(tmp_path / "out.jsonl")
    assert (tmp_path / "out.jsonl").read_text().splitlines()[0] == '{"n": 0}'


def test_keep_drops_the_records_that_no_longer_serve(tmp_path):
    path = tmp_path / "progress.jsonl"
    log = ProgressLog(path, {"seed": 0})
    log.append([{"n": n} for n in range(5)])
    log.close()
    again = ProgressLog(path, {"seed": 0})
    replayed = again.replay()
    assert [next(replayed) for _ in range(3)] == [{"n": 0}, {"n": 1}, {"n": 2}]  # the third no longer matches
    again.keep(2)
    again.append([{"n": "new"}])
    assert records(path) == [{"n": 0}, {"n": 1}, {"n": "new"}]


def test_other_settings_start_the_log_afresh(tmp_path, capsys):
    path = tmp_path / "progress.jsonl"
    log = ProgressLog(path, {"seed": 0})
    log.append([{"n": 0}])
    log.close()
    other = ProgressLog(path, {"seed": 1})
    assert not other.resumed and list(other.replay()) == [] and records(path) == []
    assert "holds progress of other settings or inputs: starting afresh" in capsys.readouterr().out
