import json
import os

import pyarrow.parquet as pq
import pytest

from stages import generate, rejection
from stages.generate import completed_prompts, shard_rows
from stages.rejection import RejectionConfig, assemble, filter_reasoning, longest_paragraph, repeated_ngram_share
from stages.rewards.sandbox import isolation_problem

GOOD = "<think>\n2 + 3 = 5\n</think>\n\nThe answer is \\boxed{5}."


def _row(pid, sample, completion, solution="5", domain="math"):
    return {"id": pid, "sample": sample, "prompt": f"question {pid}", "solution": solution, "domain": domain,
            "level": 1, "completion": completion}


def _config(**overrides):
    return RejectionConfig(shards=[], general_data="", output_dir="", targets=["math=1"],
                           max_paragraph_chars=100, **overrides)


def test_each_filter_removes_its_case_and_counts_it():
    rows = [
        _row("a", 0, GOOD),
        _row("a", 1, GOOD.replace("\\boxed{5}", "\\boxed{6}")),                          # incorrect
        _row("b", 0, "The answer is \\boxed{5}."),                                        # bad_format
        _row("c", 0, "<think>\n2 加 3 等于 5\n</think>\n\nThe answer is \\boxed{5}."),     # mixed_language
        _row("d", 0, "<think>\n" + "x" * 150 + "\n</think>\n\nThe answer is \\boxed{5}."),  # long_paragraph
        _row("e", 0, "<think>\n```py\nprint(5)\n```\n</think>\n\nThe answer is \\boxed{5}."),  # code_in_reasoning
        _row("f", 0, "<think>\n" + "add two and three " * 5 + "\n</think>\n\n\\boxed{5}"),  # repetition
        _row("a", 2, GOOD + " "),                                                          # duplicate of a/0
        _row("g", 0, GOOD), _row("g", 1, GOOD.replace("The answer", "So the answer")),     # one over max_per_prompt
    ]
    kept, removed = filter_reasoning(rows, _config())
    assert dict(removed) == {"incorrect": 1, "bad_format": 1, "mixed_language": 1, "long_paragraph": 1,
                             "code_in_reasoning": 1, "repetition": 1, "duplicate": 1, "over_max_per_prompt": 1}
    assert sorted(r["id"] for r in kept) == ["a", "g"]
    assert len(rows) == len(kept) + sum(removed.values())


def test_worker_processes_give_the_single_process_verdicts_in_order(monkeypatch):
    rows = [_row(f"p{i}", s, GOOD.replace("\\boxed{5}", f"\\boxed{{{answer}}}"), solution="5")
            for i in range(30) for s, answer in enumerate(["5", "6", "\\sqrt{25}", "10/2", "5.0"])]
    monkeypatch.setattr(rejection, "CHUNK", 7)  # 150 candidates in 22 chunks, over 2 processes
    parallel = rejection.drop_reasons(rows, _config(num_workers=2))
    single = rejection.drop_reasons(rows, _config(num_workers=1))
    assert parallel == single
    assert parallel.count("incorrect") == 30 and parallel.count(None) == 120


def test_code_rows_are_kept_when_their_program_passes_its_tests():
    if isolation_problem() and os.environ.get("R1_REQUIRE_SANDBOX") != "1":
        pytest.skip(isolation_problem())
    tests = json.dumps([{"input": "", "output": "11\n"}])
    answer = lambda code: f"<think>\nfour times two is eight\n</think>\n\n```python\n{code}\n```"  # noqa: E731
    rows = [dict(_row("c", 0, answer("print(3 + 4 * 2)"), solution="", domain="code"), tests=tests),
            dict(_row("c", 1, answer("print(14)"), solution="", domain="code"), tests=tests),
            dict(_row("d", 0, "<think>\nno program\n</think>\n\n11", solution="", domain="code"), tests=tests)]
    kept, removed = filter_reasoning(rows, _config(max_per_prompt=2, max_repeated_ngram_share=0.9))
    assert [(r["id"], r["sample"]) for r in kept] == [("c", 0)] and dict(removed) == {"incorrect": 2}


def test_code_answers_in_the_summary_are_kept():
    completion = "<think>\nprint the sum\n</think>\n\n```python\nprint(2 + 3)\n```\nThe answer is \\boxed{5}."
    kept, removed = filter_reasoning([_row("a", 0, completion)], _config(max_repeated_ngram_share=0.9))
    assert len(kept) == 1 and not removed


def test_helpers():
    assert repeated_ngram_share("a b c d a b c d") == pytest.approx(1 / 5)
    assert repeated_ngram_share("short") == 0.0
    assert longest_paragraph("ab\n\nabcd\n \nabc") == 4


def test_assembly_fills_targets_exactly_or_names_the_shortfall():
    pools = {"math": [{"id": str(i)} for i in range(10)], "general": [{"id": f"g{i}"} for i in range(3)]}
    mixture = assemble(pools, {"math": 6, "general": 2}, False, 0, 4, 1)
    assert sum(r["id"].startswith("g") for r in mixture) == 2 and len(mixture) == 8
    with pytest.raises(ValueError, match=r"domain 'general' fell short: 3 of 5 examples \(2 missing\).*samples per "
                                         r"prompt \(now 4\)"):
        assemble(pools, {"math": 6, "general": 5}, False, 0, 4, 1)
    assert len(assemble(pools, {"math": 6, "general": 5}, True, 0, 4, 1)) == 9


def test_shards_split_prompts_exactly_once():
    rows = list(range(10))
    shards = [shard_rows(rows, i, 3) for i in range(3)]
    assert sorted(x for s in shards for x in s) == rows


def test_resume_drops_torn_lines_and_incomplete_prompts(tmp_path):
    work = tmp_path / "shard.jsonl"
    lines = [json.dumps({"id": pid, "sample": s}) for pid, s in [("a", 0), ("a", 1), ("b", 0), ("b", 1), ("c", 0)]]
    work.write_text("\n".join(lines) + "\n" + '{"id": "c", "sam')
    assert completed_prompts(work, 2) == {"a", "b"}
    assert [json.loads(x)["id"] for x in work.read_text().splitlines()] == ["a", "a", "b", "b"]


def _generate(model, prompts, out, work, extra=()):
    generate.main(["--model_path", str(model), "--prompts", str(prompts), "--output_file", str(out),
                   "--work_file", str(work), "--shard_index", "1", "--num_shards", "2", "--num_samples", "3",
                   "--max_new_tokens", "6", "--max_prompts", "12", "--prompts_per_batch", "2", *extra])


def test_a_killed_shard_resumes_without_losing_or_duplicating_samples(tiny_model_dir, small_data_dir, tmp_path):
    prompts = small_data_dir / "rl_prompts.parquet"
    _generate(tiny_model_dir, prompts, tmp_path / "full.jsonl", tmp_path / "full.work")
    # A shard killed after two prompts, in the middle of writing the third one's samples.
    work = tmp_path / "resumed.work"
    full_lines = (tmp_path / "full.work").read_text().splitlines(keepends=True)
    work.write_text("".join(full_lines[:7]) + full_lines[7][:20])
    (tmp_path / "resumed.work.fingerprint").write_text((tmp_path / "full.work.fingerprint").read_text())
    _generate(tiny_model_dir, prompts, tmp_path / "resumed.jsonl", work)
    rows = [json.loads(x) for x in (tmp_path / "resumed.jsonl").read_text().splitlines()]
    keys = [(r["id"], r["sample"]) for r in rows]
    expected = {(r["id"], r["sample"]) for r in map(json.loads, full_lines)}
    assert len(keys) == len(set(keys)) == 18 and set(keys) == expected
    assert rows[:6] == [json.loads(x) for x in full_lines[:6]], "finished prompts are kept as they were"


def test_samples_of_another_model_are_not_reused(tiny_model_dir, small_data_dir, tmp_path):
    prompts = small_data_dir / "rl_prompts.parquet"
    work = tmp_path / "shard.work"
    _generate(tiny_model_dir, prompts, tmp_path / "a.jsonl", work)
    stale = [json.loads(x) for x in work.read_text().splitlines()]
    _generate(tiny_model_dir, prompts, tmp_path / "b.jsonl", work, extra=("--temperature", "1.0"))
    fresh = [json.loads(x) for x in (tmp_path / "b.jsonl").read_text().splitlines()]
    assert len(fresh) == 18 and fresh != stale


def test_an_empty_shard_still_writes_its_file(tiny_model_dir, small_data_dir, tmp_path):
    generate.main(["--model_path", str(tiny_model_dir), "--prompts", str(small_data_dir / "rl_prompts.parquet"),
                   "--output_file", str(tmp_path / "s3.jsonl"), "--shard_index", "3", "--num_shards", "4",
                   "--max_prompts", "2"])
    assert (tmp_path / "s3.jsonl").read_text() == ""


def test_rejection_cli_writes_the_mixture_and_counts_that_add_up(small_data_dir, tmp_path):
    shard = tmp_path / "shard-0.jsonl"
    rows = [_row("p1", 0, GOOD), _row("p1", 1, "no"), _row("p2", 0, GOOD), _row("p3", 0, GOOD.replace("5}", "7}"))]
    shard.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "mixture"
    rejection.main(["--shards", str(shard), "--general_data", str(small_data_dir / "general.parquet"),
                    "--targets", "math=2", "general=3", "--output_dir", str(out)])
    mixture = pq.read_table(out / "mixture.parquet").to_pylist()
    assert sorted(r["domain"] for r in mixture) == ["general"] * 3 + ["math"] * 2
    manifest = json.loads((out / "manifest.json").read_text())["metrics"]
    assert manifest["candidates"] == 4 == manifest["kept_reasoning"] + sum(manifest["removed"].values())
    assert manifest["selected"] == {"math": 2, "general": 3} and manifest["total"] == 5
    # Re-score every reasoning example of the mixture against its prompt's gold answer.
    from stages.rewards.functions import RewardSettings, build_reward_functions

    gold = {row["id"]: row["solution"] for row in rows}
    math_rows = [r for r in mixture if r["domain"] == "math"]
    (accuracy,) = build_reward_functions(["accuracy"], RewardSettings(template="chat"))
    scores = accuracy(completions=[r["messages"][-1]["content"] for r in math_rows],
                      solution=[gold[r["id"].rsplit("-s", 1)[0]] for r in math_rows])
    assert scores == [1.0, 1.0]


def test_a_broken_shard_line_is_named(tmp_path):
    shard = tmp_path / "shard-3.jsonl"
    shard.write_text(json.dumps(_row("p1", 0, GOOD)) + "\n{oops\n")
    with pytest.raises(ValueError, match=r"shard-3\.jsonl:2: not JSON"):
        rejection.read_shards([str(shard)])
