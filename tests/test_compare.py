"""stages.compare: two runs' evaluations, paired by prompt, refused where they do not compare."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stages import compare

SETTINGS = {"template": "r1_zero", "temperature": 0.6, "top_p": 0.95, "max_new_tokens": 96, "backend": "hf",
            "math_verify": "0.9.0", "engine": "5.17.0", "seed": 0, "code_version": "abc1234"}


def evaluation(directory, correct_by_prompt, data, **settings):
    """An evaluation's folder as stages.evaluate leaves it: manifest, scores.json, samples_math.jsonl."""
    directory.mkdir(parents=True)
    (directory / "manifest.json").write_text(json.dumps({"stage": "evaluate", "inputs": {
        "eval_math": {"path": str(data), "sha256": data.name}}}))
    k = len(next(iter(correct_by_prompt.values())))
    sets = {"math": {"prompts": len(correct_by_prompt), "samples_per_prompt": k}}
    comparable = {**SETTINGS, **settings, "sets": sets}
    (directory / "scores.json").write_text(json.dumps({"comparable_by": comparable}))
    (directory / "samples_math.jsonl").write_text("".join(
        json.dumps({"id": prompt, "sample": i, "correct": c}) + "\n"
        for prompt, samples in correct_by_prompt.items() for i, c in enumerate(samples)))


def data_file(path, prompts):
    pq.write_table(pa.table({"id": list(prompts), "prompt": list(prompts.values())}), path)
    return path


def test_two_runs_compare_per_model_and_set_with_the_paired_se(tmp_path, capsys):
    data = data_file(tmp_path / "same.parquet", {"p1": "1+1?", "p2": "2+2?", "p3": "3+3?"})
    evaluation(tmp_path / "a" / "eval" / "base", {"p1": [0, 0], "p2": [1, 0], "p3": [1, 1]}, data)
    evaluation(tmp_path / "a" / "eval" / "r1_zero", {"p1": [1, 0], "p2": [1, 1], "p3": [1, 1]}, data)
    evaluation(tmp_path / "b" / "eval" / "r1_zero", {"p1": [1, 1], "p2": [1, 1], "p3": [1, 1], "p4": [0, 0]}, data,
               seed=1, code_version="def5678")  # what is compared may differ
    compare.main([str(tmp_path / "a"), str(tmp_path / "b")])
    out = capsys.readouterr().out
    # differences 0.5, 0, 0 over the 3 shared prompts: mean +0.167, SE 0.167
    assert "| r1_zero | math | 0.833 | 1.000 | +0.167 | 0.167 | +1.0 | 3 |" in out, out
    assert "seed 1" in out and "evaluated by one run only, not compared: base" in out


def test_evaluations_with_other_settings_are_refused_naming_each(tmp_path):
    data = data_file(tmp_path / "same.parquet", {"p1": "1+1?"})
    evaluation(tmp_path / "a", {"p1": [1, 0]}, data)
    evaluation(tmp_path / "b", {"p1": [1, 0, 1, 1]}, data, temperature=1.0)
    with pytest.raises(SystemExit, match=r"(?s)settings differ.*temperature: 0.6 vs 1.0.*math samples per prompt "
                                         r"\(k\): 2 vs 4"):
        compare.main([str(tmp_path / "a"), str(tmp_path / "b")])


def test_other_prompts_under_the_same_ids_are_not_paired(tmp_path, capsys):
    """Another seed's tiny data names other problems with the same ids: only the same text pairs."""
    evaluation(tmp_path / "a", {"p1": [1, 0], "p2": [0, 0]},
               data_file(tmp_path / "seed0.parquet", {"p1": "1+1?", "p2": "2+2?"}))
    evaluation(tmp_path / "b", {"p1": [1, 1], "p2": [1, 1]},
               data_file(tmp_path / "seed1.parquet", {"p1": "1+1?", "p2": "7+7?"}))
    compare.main([str(tmp_path / "a"), str(tmp_path / "b")])
    assert "| a vs b | math | 0.500 | 1.000 | +0.500 | – | – | 1 |" in capsys.readouterr().out
    data_file(tmp_path / "seed1.parquet", {"p1": "5+5?", "p2": "7+7?"})
    with pytest.raises(SystemExit, match="a vs b math: the two evaluations share no prompt"):
        compare.main([str(tmp_path / "a"), str(tmp_path / "b")])
