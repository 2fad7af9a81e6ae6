import dataclasses
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter

import pyarrow.parquet as pq
import pytest

from stages import generate, rejection_sampling
from stages.generate import completed_prompts, shard_rows
from stages.lib.progress import ProgressLog
from stages.lib.rewards.sandbox import isolation_problem
from stages.lib.templates import CHAT, MATH_INSTRUCTION, R1_ZERO
from stages.rejection_sampling import RejectionConfig, assemble, longest_paragraph, readable, repeated_ngram_share
from tests.snakemake_helpers import REPO

GOOD = "<think>\n2 + 3 = 5\n</think>\n\nThe answer is \\boxed{5}."


def _row(pid, sample, completion, solution="5", domain="math"):
    return {"id": pid, "sample": sample, "prompt": f"question {pid}", "solution": solution, "domain": domain,
            "level": 1, "completion": completion}


def _config(**overrides):
    return RejectionConfig(**{"shards": [], "general_data": "", "output_dir": "out", "targets": ["math=1"],
                              "max_paragraph_chars": 100, **overrides})


def _write_shards(directory, rows, shards=1):
    """Rows round-robin over JSONL shard files, as generation writes them."""
    paths = [directory / f"shard-{i}.jsonl" for i in range(shards)]
    for i, path in enumerate(paths):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows[i::shards]))
    return paths


def _run(tmp_path, rows, general, *flags, shards=1, targets=("math=1000",), name="mixture"):
    """The stage through its command line; returns the mixture rows and the manifest's metrics."""
    paths = _write_shards(tmp_path, rows, shards) if rows is not None else sorted(tmp_path.glob("shard-*.jsonl"))
    out = tmp_path / name
    rejection_sampling.main(["--shards", *map(str, paths), "--general_data", str(general), "--targets", *targets,
                    "--output_dir", str(out), "--work_dir", str(tmp_path / "work"), "--max_paragraph_chars", "100",
                    "--allow_shortfall", "true", *flags])
    return (pq.read_table(out / "mixture.parquet").to_pylist(),
            json.loads((out / "manifest.json").read_text())["metrics"])


def test_each_filter_removes_its_case_and_counts_it(small_data_dir, tmp_path):
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
        _row("h", 0, GOOD.replace("2 + 3 = 5", "2 + 3 = 6\n6 - 1 = 5")),                   # wrong_step
    ]
    mixture, metrics = _run(tmp_path, rows, small_data_dir / "general.parquet", "--num_workers", "1",
                            "--check_steps", "true", targets=("math=1000",))
    assert metrics["removed"] == {"incorrect": 1, "bad_format": 1, "mixed_language": 1, "long_paragraph": 1,
                                  "code_in_reasoning": 1, "repetition": 1, "duplicate": 1, "over_max_per_prompt": 1,
                                  "wrong_step": 1}
    assert sorted(r["id"].split("-")[0] for r in mixture) == ["a", "g"]
    assert len(rows) == metrics["kept_reasoning"] + sum(metrics["removed"].values())


def test_the_step_check_is_the_configs_choice_and_reads_math_only(small_data_dir, tmp_path):
    wrong_step = GOOD.replace("2 + 3 = 5", "2 + 3 = 6\n6 - 1 = 5")
    rows = [_row("h", 0, wrong_step), _row("i", 0, wrong_step.replace("\\boxed{5}", "```python\nprint(5)\n```"),
                                           solution="", domain="code")]
    rows[1]["tests"] = json.dumps([{"input": "", "output": "5\n"}])
    general = small_data_dir / "general.parquet"
    config = rejection_sampling.RejectionConfig(shards=[], general_data=str(general), output_dir="out", targets=[],
                                                allow_rlimit_only=True)
    checked = rejection_sampling.Filters(dataclasses.replace(config, check_steps=True))
    unchecked = rejection_sampling.Filters(config)
    try:
        assert checked.reason_to_drop(rows[0]) == "wrong_step" and unchecked.reason_to_drop(rows[0]) is None
        assert checked.reason_to_drop(rows[1]) is None  # code reasoning is not arithmetic to check
    finally:
        checked.grader.close()
        unchecked.grader.close()


def _in_memory_mixture(rows, config, general):
    """The stage's selection as it was before it streamed (every candidate in memory): the reference
    that the streaming stage must match row for row."""
    filters = rejection_sampling.Filters(config)
    removed, kept, seen = Counter(), [], set()
    for row in rows:
        reason = filters.reason_to_drop(row)
        key = (row["id"], " ".join(row["completion"].split()))
        if reason is None and key in seen:
            reason = "duplicate"
        if reason:
            removed[reason] += 1
            continue
        seen.add(key)
        kept.append(row)
    filters.grader.close()
    random.Random(config.seed).shuffle(kept)
    per_prompt, pools = Counter(), {}
    for row in kept:
        per_prompt[row["id"]] += 1
        if per_prompt[row["id"]] > config.max_per_prompt:
            removed["over_max_per_prompt"] += 1
        else:
            pools.setdefault(row["domain"], []).append(rejection_sampling.reasoning_example(row))
    pools["general"] = rejection_sampling.general_examples(general)
    return assemble(pools, config.target_counts(), True, config.seed, 5, config.max_per_prompt), removed


def _pool(prompts=40):
    """Five samples per prompt: right, wrong, equivalent forms, a duplicate, a defect."""
    rows = []
    for i in range(prompts):
        for s, answer in enumerate(["5", "6", "\\sqrt{25}", "10/2", "5"]):
            text = GOOD.replace("\\boxed{5}", f"\\boxed{{{answer}}}").replace("2 + 3", f"2 + 3 (try {s % 4})")
            rows.append(_row(f"p{i}", s, text if i % 7 else text.replace("<think>", "")))
    return rows


@pytest.mark.parametrize("workers", [1, 2])
def test_streaming_gives_the_in_memory_verdicts_mixture_and_order(small_data_dir, tmp_path, monkeypatch, workers):
    rows, general = _pool(), small_data_dir / "general.parquet"
    monkeypatch.setattr(rejection_sampling, "CHUNK_BYTES", 1500)  # 200 candidates in ~50 chunks over 3 shards
    mixture, metrics = _run(tmp_path, rows, general, "--num_workers", str(workers), "--max_per_prompt", "2",
                            shards=3, targets=("math=50", "general=7"))
    config = _config(max_per_prompt=2, targets=["math=50", "general=7"])
    # the reference reads the shards in the stage's order: shard by shard
    expected, removed = _in_memory_mixture([r for i in range(3) for r in rows[i::3]], config, general)
    assert mixture == expected
    assert metrics["removed"] == dict(removed) and metrics["candidates"] == len(rows)
    assert metrics["selected"] == {"math": 50, "general": 7}


def test_a_rerun_reuses_the_verified_chunks_and_verifies_a_torn_rest(small_data_dir, tmp_path, monkeypatch, capsys):
    general = small_data_dir / "general.parquet"
    monkeypatch.setattr(rejection_sampling, "CHUNK_BYTES", 1500)
    first, _ = _run(tmp_path, _pool(), general, "--num_workers", "1", targets=("math=30",))
    log = tmp_path / "work" / "verdicts.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    assert len(lines) > 10
    log.write_text("".join(lines[:6]) + lines[6][:40])  # what a kill mid-write leaves
    capsys.readouterr()
    again, _ = _run(tmp_path, None, general, "--num_workers", "1", targets=("math=30",), name="again")
    assert "reused the verdicts of 5 chunk(s)" in capsys.readouterr().out
    assert again == first and log.read_text().splitlines(keepends=True) == lines
    # other filter settings: nothing is reused
    _run(tmp_path, None, general, "--num_workers", "1", "--min_language_share", "0.5", targets=("math=30",),
         name="other")
    assert "reused" not in capsys.readouterr().out


def test_a_killed_stage_resumes_from_its_verified_chunks(small_data_dir, tmp_path, venv_env):
    """A real kill (SIGKILL, as Slurm's time limit ends in) mid-verification, then a rerun."""
    paths = _write_shards(tmp_path, _pool(prompts=400), shards=2)
    out, work = tmp_path / "mixture", tmp_path / "work"
    log = work / "verdicts.jsonl"
    script = ("import sys; from stages import rejection_sampling as stage; "
              "stage.CHUNK_BYTES = 1500; stage.main(sys.argv[1:])")
    argv = [sys.executable, "-c", script, "--shards", *map(str, paths), "--general_data",
            str(small_data_dir / "general.parquet"), "--targets", "math=100", "--output_dir", str(out),
            "--work_dir", str(work), "--max_paragraph_chars", "100", "--num_workers", "1"]
    job = subprocess.Popen(argv, env=venv_env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not log.exists() or log.read_bytes().count(b"\n") < 6):
        time.sleep(0.05)
    job.kill()
    job.wait()
    verified = log.read_bytes().count(b"\n") - 1
    assert job.returncode == -signal.SIGKILL and not out.exists(), "the stage finished before it was killed"
    assert verified >= 5
    rerun = subprocess.run(argv, env=venv_env, cwd=REPO, capture_output=True, text=True, check=True)
    assert f"reused the verdicts of {verified} chunk(s)" in rerun.stdout or \
        f"reused the verdicts of {verified + 1} chunk(s)" in rerun.stdout  # one more may land between count and kill
    assert json.loads((out / "manifest.json").read_text())["metrics"]["candidates"] == 2000


@pytest.mark.skipif(bool(isolation_problem()) and os.environ.get("R1_REQUIRE_SANDBOX") != "1",
                    reason="no sandbox for code rows")
def test_code_rows_are_kept_when_their_program_passes_its_tests(small_data_dir, tmp_path):
    tests = json.dumps([{"input": "", "output": "11\n"}])
    answer = lambda code: f"<think>\nfour times two is eight\n</think>\n\n```python\n{code}\n```"  # noqa: E731
    rows = [dict(_row("c", 0, answer("print(3 + 4 * 2)"), solution="", domain="code"), tests=tests),
            dict(_row("c", 1, answer("print(14)"), solution="", domain="code"), tests=tests),
            dict(_row("d", 0, "<think>\nno program\n</think>\n\n11", solution="", domain="code"), tests=tests)]
    mixture, metrics = _run(tmp_path, rows, small_data_dir / "general.parquet", "--max_per_prompt", "2",
                            "--max_repeated_ngram_share", "0.9", targets=("code=5",))
    assert [r["id"] for r in mixture] == ["c-s0"] and metrics["removed"] == {"incorrect": 2}


def test_code_answers_in_the_summary_are_kept(small_data_dir, tmp_path):
    completion = "<think>\nprint the sum\n</think>\n\n```python\nprint(2 + 3)\n```\nThe answer is \\boxed{5}."
    mixture, metrics = _run(tmp_path, [_row("a", 0, completion)], small_data_dir / "general.parquet",
                            "--max_repeated_ngram_share", "0.9")
    assert len(mixture) == 1 and not metrics["removed"]


def test_r1_zero_samples_become_chat_format_cold_start_rows_without_a_general_share(tmp_path):
    """The cold start from R1-Zero's samples: R1-Zero's template is graded and filtered as it is, and each
    kept sample is rewritten into the chat format Dev1 learns, one sentence per line, the answer boxed."""
    right = "<think> Ann has 2 apples. 2 + 3 = 5. </think> <answer> 5 </answer>"
    rows = [_row("a", 0, right), _row("a", 1, right.replace("<answer> 5", "<answer> 6")),      # incorrect
            _row("b", 0, right.replace("2 + 3 = 5", "2 + 3 = 6")),                         # wrong_step
            _row("c", 0, "<think>\n2 + 3 = 5\n</think>\n\nThe answer is \\boxed{5}."),      # no <answer>: incorrect
            _row("d", 0, "<think> 2 + 3 = 5 </think> <answer> \\boxed{5} </answer>")]
    mixture, metrics = _run(tmp_path, rows, "", "--template", "r1_zero", "--check_steps", "true")
    by_id = {r["id"]: r["messages"] for r in mixture}
    assert by_id["a-s0"][-1]["content"] == ("<think>\nAnn has 2 apples\n2 + 3 = 5\n</think>\n\n"
                                            "The answer is \\boxed{5}.")
    assert by_id["d-s0"][-1]["content"] == "<think>\n2 + 3 = 5\n</think>\n\nThe answer is \\boxed{5}."
    assert by_id["a-s0"][0]["content"] == "question a " + MATH_INSTRUCTION
    assert metrics["removed"] == {"incorrect": 2, "wrong_step": 1} and "general" not in metrics["available"]
    for messages in by_id.values():  # what Dev1 learns scores as right in the format it is evaluated in
        assert CHAT.is_well_formatted(messages[-1]["content"])
    code = dict(_row("e", 0, "<think> Read two numbers. Print their sum. </think> <answer> ```python\nprint(1)\n``` "
                             "</answer>", solution="", domain="code"), tests='[{"input": "", "output": "1"}]')
    assert readable(code, R1_ZERO) == ("<think>\nRead two numbers.\nPrint their sum.\n</think>\n\n"
                                       "```python\nprint(1)\n```")


def test_a_general_target_without_general_data_is_named(tmp_path):
    with pytest.raises(ValueError, match="'general' needs --general_data"):
        _run(tmp_path, [_row("a", 0, GOOD)], "", targets=("math=1", "general=1"))


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


def test_the_first_shards_project_each_target_and_stop_one_out_of_reach(small_data_dir, tmp_path):
    """The projection scales the first shards' kept rows to every shard and fails, naming the domain and what to
    change, only when a target is above even its upper bound (F9: a short code target was learned after all
    64 shards); with allow_shortfall it writes the projection and lets the other shards run."""
    assert rejection_sampling.projected_counts(0, 8, 64) == (0, 32)  # nothing kept: at most ~4 per 8 shards
    expected, upper = rejection_sampling.projected_counts(100, 8, 64)
    assert expected == 800 and 950 < upper < 1000
    rows = [_row(f"p{i}", 0, GOOD if i % 8 else GOOD.replace("\\boxed{5}", "\\boxed{6}")) for i in range(40)]
    paths = _write_shards(tmp_path, rows, shards=2)
    projection = tmp_path / "generate" / "projection.json"

    def project(*targets, shortfall="false"):
        rejection_sampling.main(["--shards", str(paths[0]), "--general_data", str(small_data_dir / "general.parquet"),
                                 "--targets", *targets, "--projection_file", str(projection), "--projected_num_shards",
                                 "8", "--work_dir", str(tmp_path / "work"), "--max_paragraph_chars", "100",
                                 "--allow_shortfall", shortfall])

    project("math=60", "general=5")  # 15 kept of 20 in shard 0 of 8: ~120 expected
    domains = json.loads(projection.read_text())["domains"]
    assert domains["math"] | {"upper_bound": 0} == {"kept": 15, "expected": 120, "upper_bound": 0, "target": 60,
                                                    "out_of_reach": False}
    assert domains["general"]["kept"] == domains["general"]["expected"] > 5  # counted, not projected
    projection.unlink()
    with pytest.raises(SystemExit, match=r"projected from the first 1 of 8 shards: 'math' ~120 \(at most ~\d+\) "
                                         r"of 500.*lower rejection_sampling.targets"):
        project("math=500", "general=5")
    assert not projection.exists()  # the later shards wait for it: none runs
    project("math=500", "general=5", shortfall="true")
    assert json.loads(projection.read_text())["domains"]["math"]["out_of_reach"]
    with pytest.raises(ValueError, match="either --output_dir .* or --projection_file"):
        _config(projection_file=str(projection))


def test_shards_split_prompts_exactly_once():
    rows = list(range(10))
    shards = [shard_rows(rows, i, 3) for i in range(3)]
    assert sorted(x for s in shards for x in s) == rows


def test_resume_drops_torn_lines_and_incomplete_prompts(tmp_path):
    work = tmp_path / "shard.jsonl"
    log = ProgressLog(work, {"model": "m"})
    log.append([{"id": pid, "sample": s} for pid, s in [("a", 0), ("a", 1), ("b", 0), ("b", 1), ("c", 0)]])
    log.close()
    with open(work, "a") as f:
        f.write('{"id": "c", "sam')  # what a kill mid-write leaves
    assert completed_prompts(ProgressLog(work, {"model": "m"}), 2) == {"a", "b"}
    assert [json.loads(x).get("id") for x in work.read_text().splitlines()] == [None, "a", "a", "b", "b"]


def _generate(model, prompts, out, work, extra=()):
    generate.main(["--model_path", str(model), "--prompts", str(prompts), "--output_file", str(out),
                   "--work_file", str(work), "--shard_index", "1", "--num_shards", "2", "--num_samples", "3",
                   "--max_new_tokens", "6", "--max_prompts", "12", "--prompts_per_batch", "2", *extra])


def test_a_killed_shard_resumes_without_losing_or_duplicating_samples(tiny_model_dir, small_data_dir, tmp_path):
    prompts = small_data_dir / "rl_prompts.parquet"
    _generate(tiny_model_dir, prompts, tmp_path / "full.jsonl", tmp_path / "full.work")
    # A shard killed after two prompts, in the middle of writing the third one's samples.
    work = tmp_path / "resumed.work"
    header, *full_lines = (tmp_path / "full.work").read_text().splitlines(keepends=True)  # the fingerprint first
    work.write_text(header + "".join(full_lines[:7]) + full_lines[7][:20])
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
    stale = [json.loads(x) for x in work.read_text().splitlines()[1:]]  # after the fingerprint
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
    rejection_sampling.main(["--shards", str(shard), "--general_data", str(small_data_dir / "general.parquet"),
                    "--targets", "math=2", "general=3", "--output_dir", str(out)])
    mixture = pq.read_table(out / "mixture.parquet").to_pylist()
    assert sorted(r["domain"] for r in mixture) == ["general"] * 3 + ["math"] * 2
    manifest = json.loads((out / "manifest.json").read_text())["metrics"]
    assert manifest["candidates"] == 4 == manifest["kept_reasoning"] + sum(manifest["removed"].values())
    assert manifest["selected"] == {"math": 2, "general": 3} and manifest["total"] == 5
    # Re-score every reasoning example of the mixture against its prompt's gold answer.
    from stages.lib.rewards.functions import RewardSettings, build_reward_functions

    gold = {row["id"]: row["solution"] for row in rows}
    math_rows = [r for r in mixture if r["domain"] == "math"]
    (accuracy,) = build_reward_functions(["accuracy"], RewardSettings(template="chat"))
    scores = accuracy(completions=[r["messages"][-1]["content"] for r in math_rows],
                      solution=[gold[r["id"].rsplit("-s", 1)[0]] for r in math_rows])
    assert scores == [1.0, 1.0]


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_broken_shard_line_is_named(small_data_dir, tmp_path, workers):
    shard = tmp_path / "shard-3.jsonl"
    shard.write_text(json.dumps(_row("p1", 0, GOOD)) + "\n" + json.dumps(_row("p2", 0, GOOD)) + "\n{oops\n")
    with pytest.raises(ValueError, match=r"shard-3\.jsonl:3: not JSON"):
        rejection_sampling.main(["--shards", str(shard), "--general_data", str(small_data_dir / "general.parquet"),
                        "--targets", "math=1", "--output_dir", str(tmp_path / "out"), "--num_workers", workers])
    shard.write_text(json.dumps({"id": "p1"}) + "\n")
    with pytest.raises(ValueError, match=r"shard-3\.jsonl:1: missing field\(s\) \['sample'"):
        rejection_sampling.main(["--shards", str(shard), "--general_data", str(small_data_dir / "general.parquet"),
                        "--targets", "math=1", "--output_dir", str(tmp_path / "out"), "--num_workers", workers])


def test_judge_verdicts_are_parsed_strictly():
    from stages.lib.judge import parse_verdict

    assert parse_verdict("CORRECT") is True and parse_verdict(" incorrect.\n") is False
    assert parse_verdict("Correct") is True
    for reply in ("", "CORRECT or INCORRECT", "I think CORRECT", "CORRECTINCORRECT", "correct!", "yes"):
        assert parse_verdict(reply) is None, reply


def test_a_judge_model_decides_its_domains_and_a_rerun_reuses_its_verdicts(tiny_model_dir, small_data_dir, tmp_path,
                                                                            capsys):
    """The plumbing, with a tiny model as the judge: its replies are mostly no verdict at all, which
    is the point of parsing strictly (how good a judge is, is the chosen model's matter)."""
    from stages.lib.generation import load_generator
    from stages.lib.judge import Judge

    rows = [_row(f"q{i}", 0, GOOD.replace("\\boxed{5}", f"\\boxed{{{i}}}"), solution=str(i), domain="open_qa")
            for i in range(6)] + [_row("m", 0, GOOD), _row("m", 1, GOOD.replace("5}", "6}"))]
    flags = ("--judge_model", str(tiny_model_dir), "--judge_domains", "open_qa", "--judge_batch_size", "4",
             "--num_workers", "1")
    mixture, metrics = _run(tmp_path, rows, small_data_dir / "general.parquet", *flags,
                            targets=("open_qa=6", "math=1"))
    judged = metrics["judged"]
    assert judged["candidates"] == 6 == judged["correct"] + judged["incorrect"] + judged["not_judged"]
    assert sum(r["domain"] == "open_qa" for r in mixture) == judged["correct"]
    assert metrics["removed"].get("not_judged", 0) == judged["not_judged"]
    assert metrics["removed"]["incorrect"] == 1 + judged["incorrect"]  # math is still graded by rule
    log = (tmp_path / "work" / "judged.jsonl").read_text().splitlines()
    assert len(log) == 1 + 6
    # The verdicts are the model's replies, parsed: the same prompts give the same replies here.
    judge = Judge(load_generator(str(tiny_model_dir)), 8)
    replies = judge.judge([r["prompt"] for r in rows[:6]], [r["solution"] for r in rows[:6]],
                          [r["solution"] for r in rows[:6]])
    assert [json.loads(line)["verdict"] for line in log[1:]] == replies
    assert all(json.loads(line)["place"][0].endswith("shard-0.jsonl") for line in log[1:])
    capsys.readouterr()
    again, _ = _run(tmp_path, None, small_data_dir / "general.parquet", *flags, targets=("open_qa=6", "math=1"),
                    name="again")
    assert "6 judged before" in capsys.readouterr().out and again == mixture


def test_a_judge_needs_a_model_and_domains():
    with pytest.raises(ValueError, match="judge_model and judge_domains"):
        _config(judge_domains=["open_qa"])
    with pytest.raises(ValueError, match="'general', the non-reasoning share"):
        _config(judge_model="m", judge_domains=["general"])


def test_a_shard_logs_its_progress_with_elapsed_time_and_eta(tiny_model_dir, small_data_dir, tmp_path, capsys):
    """64-128 shards of up to 2 h each: each log line says how far, how long and how much longer."""
    generate.main(["--model_path", str(tiny_model_dir), "--prompts", str(small_data_dir / "rl_prompts.parquet"),
                   "--output_file", str(tmp_path / "s0.jsonl"), "--max_prompts", "4", "--prompts_per_batch", "2",
                   "--num_samples", "2", "--max_new_tokens", "4"])
    lines = [line for line in capsys.readouterr().out.splitlines() if re.match(r"shard 0/1: \d+/4 prompts \(", line)]
    assert [line.split(" (")[0] for line in lines] == ["shard 0/1: 2/4 prompts", "shard 0/1: 4/4 prompts"]
    assert re.fullmatch(r"shard 0/1: 2/4 prompts \(50%\) \| \d+:\d\d:\d\d elapsed, ETA \d+:\d\d:\d\d", lines[0])
