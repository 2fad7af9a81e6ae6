import json

import pytest

from stages.report import change_rows, paired_change


def test_paired_change_pairs_prompts_and_gives_the_standard_error_of_the_differences():
    before = {"a": 0.0, "b": 0.5, "c": 1.0}
    after = {"a": 0.5, "b": 0.5, "c": 1.0, "only_after": 0.0}
    mean_before, mean_after, change, se = paired_change(before, after)
    assert (mean_before, mean_after) == pytest.approx((0.5, 2 / 3))
    assert change == pytest.approx(1 / 6)
    assert se == pytest.approx(1 / 6)  # differences 0.5, 0, 0: sd 0.2887, over sqrt(3)
    with pytest.raises(ValueError, match="share no prompt"):
        paired_change({"a": 1.0}, {"b": 1.0})


def write_samples(directory, correct_by_prompt):
    directory.mkdir(parents=True)
    lines = [json.dumps({"id": prompt, "sample": i, "correct": c})
             for prompt, samples in correct_by_prompt.items() for i, c in enumerate(samples)]
    (directory / "samples_math.jsonl").write_text("\n".join(lines) + "\n")


def test_each_model_is_compared_with_the_model_it_follows_when_both_were_evaluated(tmp_path):
    write_samples(tmp_path / "base", {"p1": [False, False], "p2": [True, False]})
    write_samples(tmp_path / "r1_zero", {"p1": [True, False], "p2": [True, True]})
    write_samples(tmp_path / "reasoning_rl", {"p1": [True, True], "p2": [True, True]})
    header, rows = change_rows(tmp_path, ["base", "r1_zero", "reasoning_rl"])
    assert len(header) == len(rows[0])
    assert rows == [["R1-Zero vs Base", "math", "0.250", "0.750", "+0.500", "0.000", "–"]]
