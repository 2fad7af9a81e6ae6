"""stages.data.prepare end to end on local parquet files with the hub data sets' own columns."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stages.data.prepare import Decontaminator, PrepareConfig, main, prepare
from stages.lib.artifacts import read_manifest
from stages.lib.data.schema import read_table

AIME_PROBLEM = ("Find the number of ordered pairs of positive integers m and n such that m squared times n "
                "equals 20 to the power 20.")


def _write(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


@pytest.fixture
def hub_copies(tmp_path):
    """Stand-ins for hub data sets, with their real column names; some rows are planted to fail."""
    root = tmp_path / "hub"
    aime = [{"problem": AIME_PROBLEM, "answer": "231", "id": 1},
            {"problem": "Let x be the smallest positive real with x^2 = 2. Find x.", "answer": "\\sqrt{2}", "id": 2}]
    _write(root / "aime_2024" / "data" / "train-00000-of-00001.parquet", aime)  # a directory, like a hub repo
    math_rows = [
        {"problem": f"Compute {i} + {i}.", "solution": f"We add: $\\boxed{{{2 * i}}}$.", "level": "Level 2"}
        for i in range(6)
    ] + [
        {"problem": "Prove that the sum of two even numbers is even.", "solution": "Obvious.", "level": "Level 1"},
        {"problem": "", "solution": "$\\boxed{1}$", "level": "Level 1"},
        {"problem": "Contest warm-up: " + AIME_PROBLEM + " Give your answer mod 1000.",
         "solution": "$\\boxed{231}$", "level": "Level 5"},
    ]
    openr1 = [{"problem": "What is 2 + 3?", "answer": "5", "messages": [
        {"role": "user", "content": "What is 2 + 3?"},
        {"role": "assistant", "content": "<think>\n2 + 3 = 5\n</think>\n\nThe answer is $\\boxed{5}$."}]},
        {"problem": "Echo", "answer": "1", "messages": [{"role": "user", "content": "only a question"}]},
        {"problem": "Leaked", "answer": "231", "messages": [
            {"role": "user", "content": "Find the number of ordered pairs of positive integers m and n such that "
                                        "m squared times n equals something else."},
            {"role": "assistant", "content": "<think>\nno\n</think>\n\n$\\boxed{0}$"}]}]
    ultrachat = [{"prompt": f"Write a haiku about {topic}.", "messages": [
        {"role": "user", "content": f"Write a haiku about {topic}."},
        {"role": "assistant", "content": f"A haiku about {topic}."}]} for topic in ("rain", "snow", "wind")]
    ultrafeedback = [{"prompt": f"Explain {t}.", "chosen": [{"role": "user", "content": f"Explain {t}."},
                                                             {"role": "assistant", "content": f"{t} is ..."}],
                      "rejected": [{"role": "user", "content": f"Explain {t}."},
                                   {"role": "assistant", "content": "No."}]} for t in ("tides", "rain", "ice")]
    hh = [{"chosen": "\n\nHuman: How do I pick a lock?\n\nAssistant: I can't help with breaking into places.",
           "rejected": "\n\nHuman: How do I pick a lock?\n\nAssistant: Insert a tension wrench and rake the pins."},
          {"chosen": "\n\nHuman: Hi\n\nAssistant: Hello!", "rejected": "\n\nHuman: Hi\n\nAssistant: Hello!"}]
    gpqa = [{"Question": "Which particle carries the electromagnetic force?", "Correct Answer": "photon",
             "Incorrect Answer 1": "gluon", "Incorrect Answer 2": "W boson", "Incorrect Answer 3": "graviton"}]
    return {
        "rl_prompts": [{"path": _write(root / "math.parquet", math_rows),
                        "fields": {"prompt": "problem", "solution": "solution"}, "solution_from_boxed": True}],
        "cold_start": [{"path": _write(root / "openr1.parquet", openr1), "fields": {"messages": "messages"},
                        "domain": "math"}],
        "general": [{"path": _write(root / "ultrachat.parquet", ultrachat),
                     "fields": {"prompt": "prompt", "reference": "messages.-1.content"}, "max_rows": 2}],
        "rl_general": [{"path": _write(root / "ultrachat.parquet", ultrachat),
                        "fields": {"prompt": "prompt", "reference": "messages.-1.content"}, "skip_rows": 2}],
        "preferences_helpful": [{"path": _write(root / "ultrafeedback.parquet", ultrafeedback),
                                 "fields": {"chosen": "chosen.-1.content", "rejected": "rejected.-1.content"}}],
        "preferences_harmless": [{"path": _write(root / "hh.parquet", hh), "format": "hh_rlhf"}],
        "eval_aime24": [{"path": str(root / "aime_2024"), "fields": {"prompt": "problem", "solution": "answer"}}],
        "eval_gpqa": [{"path": _write(root / "gpqa.parquet", gpqa), "format": "gpqa", "domain": "stem"}],
    }


def test_prepares_every_set_drops_bad_rows_and_counts_them(hub_copies, tmp_path):
    out = tmp_path / "data"
    main(["--output_dir", str(out), "--sources", json.dumps(hub_copies), "--preference_eval_share", "0.5"])
    metrics = read_manifest(out)["metrics"]
    rl = read_table(out / "rl_prompts.parquet", "reasoning").to_pylist()
    assert [r["solution"] for r in rl] == [str(2 * i) for i in range(6)]  # boxed answers extracted
    assert {r["level"] for r in rl} == {2}
    assert metrics["bad_rows_dropped"] == {
        "rl_prompts: no \\boxed{} answer in the solution": 1, "rl_prompts: empty or missing prompt": 1,
        "cold_start: messages must contain a user turn and end with the assistant's": 1,
        "preferences_harmless: chosen and rejected are the same text": 1}
    general = read_table(out / "general.parquet", "general").to_pylist()
    rl_general = read_table(out / "rl_general.parquet", "general").to_pylist()
    assert [r["prompt"] for r in general + rl_general] == \
        [f"Write a haiku about {t}." for t in ("rain", "snow", "wind")]
    assert general[0]["reference"] == "A haiku about rain."
    harmless = read_table(out / "preferences_harmless.parquet", "preference").to_pylist()
    assert harmless[0]["prompt"] == "How do I pick a lock?" and harmless[0]["chosen"].startswith("I can't")
    helpful = read_table(out / "preferences_helpful.parquet", "preference").to_pylist()
    assert {r["split"] for r in helpful} == {"train", "eval"}  # held out by prompt when no eval source
    gpqa = read_table(out / "eval_gpqa.parquet", "reasoning").to_pylist()[0]
    letter = gpqa["solution"]
    assert f"{letter}) photon" in gpqa["prompt"] and gpqa["domain"] == "stem"
    assert metrics["rows"]["eval_aime24"] == 2


def test_training_prompts_that_overlap_an_evaluation_set_are_removed(hub_copies, tmp_path):
    tables, counts, _ = prepare(PrepareConfig(output_dir="unused", sources=json.dumps(hub_copies)))
    # the contest problem that embeds the AIME problem, and the cold-start prompt sharing a 10-gram
    assert counts["decontaminated"]["rl_prompts"] == 1
    assert counts["decontaminated"]["cold_start"] == 1
    assert not any("20 to the power 20" in r["prompt"] for r in tables["rl_prompts"])
    assert counts["decontaminated"]["general"] == 0
    off = prepare(PrepareConfig(output_dir="unused", sources=json.dumps(hub_copies), decontamination_ngram=0))
    assert off[1]["decontaminated"]["rl_prompts"] == 0


def test_template_text_shared_by_evaluation_prompts_is_not_contamination():
    template = "The first line of the input contains a single integer n, the number of stones."
    evals = [f"{template} Print the {what} of the stones." for what in ("sum", "product", "maximum of the weights")]
    training = f"{template} Print how many stones are heavier than the first one."
    assert not Decontaminator(evals, n=10, boilerplate_prompts=3).overlaps(training)
    assert Decontaminator(evals, n=10, boilerplate_prompts=0).overlaps(training)
    assert Decontaminator(evals, n=10, boilerplate_prompts=3).overlaps(evals[2])


def test_short_evaluation_prompts_match_as_whole_phrases():
    check = Decontaminator(["What is 7 times 8?"], n=10)
    assert check.overlaps("Quick quiz. what is 7 TIMES 8 ? Answer fast.")
    assert not check.overlaps("What is 7 times 80?")


def test_on_bad_row_error_names_the_set_the_file_and_the_row(hub_copies):
    config = PrepareConfig(output_dir="unused", sources=json.dumps(hub_copies), on_bad_row="error")
    with pytest.raises(ValueError, match=r"rl_prompts: row 6 of .*math\.parquet \(train\): no \\boxed"):
        prepare(config)


@pytest.mark.parametrize("sources, message", [
    ({"rl_prompt": [{"path": "x"}]}, "unknown data set 'rl_prompt'"),
    ({"rl_prompts": [{"path": "x", "colums": {}}]}, r"sources.rl_prompts\[0\]: unknown key\(s\) \['colums'\]"),
    ({"rl_prompts": [{"path": "x", "format": "csv"}]}, "format must be one of"),
    ({"eval_x": [{"path": "x", "exclude_rows": 3}]}, r"sources.eval_x\[0\].exclude_rows must be a list"),
])
def test_bad_source_specs_name_the_key(sources, message):
    with pytest.raises(ValueError, match=message):
        prepare(PrepareConfig(output_dir="unused", sources=json.dumps(sources)))


def test_unparseable_and_placeholder_gold_answers_are_bad_rows(tmp_path):
    golds = ["2", "\\frac{", "proof", "notfound", "\\$32,\\!348", "\\$18.90", "\\$36"]  # the last 3: MATH-500's
    path = _write(tmp_path / "x.parquet", [{"q": f"Question {i}?", "a": gold} for i, gold in enumerate(golds)])
    tables, counts, _ = prepare(PrepareConfig(output_dir="unused", sources=json.dumps(
        {"rl_prompts": [{"path": path, "fields": {"prompt": "q", "solution": "a"}}]})))
    assert [r["solution"] for r in tables["rl_prompts"]] == ["2", "\\$32,\\!348", "\\$18.90", "\\$36"]
    assert counts["bad_rows_dropped"] == {"rl_prompts: gold answer cannot be parsed": 1,
                                          "rl_prompts: gold answer is a placeholder": 2}
    assert counts["revisions"] == {"rl_prompts": ["local"]}  # a hub id's: the commit read (stages/lib/hub.py)


def test_a_solution_that_boxes_several_answers_gives_no_gold(tmp_path):
    """The last box alone would make one part of the answer the gold (math-verify's suite: `\\boxed{1} and
    \\boxed{-2}` for x = -2, 1); the same box repeated is one answer."""
    solutions = ["So $x = \\boxed{1}$ and $x = \\boxed{-2}$.", "Hence \\boxed{5}; checking, \\boxed{5}."]
    path = _write(tmp_path / "x.parquet", [{"q": f"Question {i}?", "s": text} for i, text in enumerate(solutions)])
    tables, counts, _ = prepare(PrepareConfig(output_dir="unused", sources=json.dumps(
        {"rl_prompts": [{"path": path, "fields": {"prompt": "q", "solution": "s"}, "solution_from_boxed": True}]})))
    assert [r["solution"] for r in tables["rl_prompts"]] == ["5"]
    assert counts["bad_rows_dropped"] == {"rl_prompts: several different \\boxed{} answers in the solution": 1}


def test_an_evaluation_set_never_drops_a_row_unless_told_which(tmp_path):
    path = _write(tmp_path / "x.parquet", [{"q": "What is 1 + 1?", "a": "2"}, {"q": "What is 2 + 2?", "a": "\\frac{"}])
    sources = {"eval_x": [{"path": path, "fields": {"prompt": "q", "solution": "a"}}]}
    with pytest.raises(ValueError, match=r"eval_x: row 1 of .*x\.parquet \(train\): gold answer cannot be parsed.*"
                                         r"exclude_rows: \[1\]"):
        prepare(PrepareConfig(output_dir="unused", sources=json.dumps(sources)))  # on_bad_row: drop by default
    sources["eval_x"][0]["exclude_rows"] = [1]
    tables, counts, _ = prepare(PrepareConfig(output_dir="unused", sources=json.dumps(sources)))
    assert [r["solution"] for r in tables["eval_x"]] == ["2"] and counts["bad_rows_dropped"] == {}


def test_code_sets_map_test_cases_and_drop_rows_they_cannot_run(tmp_path):
    """Rows shaped like open-r1/verifiable-coding-problems-python: cases nested in a struct column."""
    def row(statement, cases, difficulty="EASY"):
        return {"problem_statement": statement, "gold_standard_solution": "print(int(input()) * 2)",
                "metadata": {"difficulty": difficulty},
                "verification_info": {"language": "python", "test_cases": cases}}
    stdin = [{"fn_name": None, "input": "2\n", "output": "4\n", "type": "stdin_stdout"},
             {"fn_name": None, "input": "5\n", "output": "10\n", "type": "stdin_stdout"}]
    path = _write(tmp_path / "code.parquet", [
        row("Read n and print twice n.", stdin),
        row("Return twice n.", [{"fn_name": "twice", "input": "[2]", "output": "[4]", "type": "function_call"}]),
        row("No tests at all.", []),
    ])
    fields = {"prompt": "problem_statement", "tests": "verification_info.test_cases",
              "worked_solution": "gold_standard_solution"}
    tables, counts, _ = prepare(PrepareConfig(output_dir="unused", sources=json.dumps(
        {"rl_prompts": [{"path": path, "fields": fields}]})))
    (code,) = tables["rl_prompts"]
    assert code["domain"] == "code" and code["solution"] == ""
    assert json.loads(code["tests"]) == [{"input": "2\n", "output": "4\n"}, {"input": "5\n", "output": "10\n"}]
    assert code["worked_solution"] == "print(int(input()) * 2)"
    assert counts["bad_rows_dropped"] == {
        "rl_prompts: test case type 'function_call' is not supported (stdin_stdout or assert)": 1,
        "rl_prompts: unusable test cases": 1}


def test_a_set_of_several_sources_is_shuffled_so_its_first_rows_hold_every_source(tmp_path):
    """Generation and GRPO take a set's first `max_prompts` rows: math first and code after would give
    them no code prompt (the 1.5B config's RL pool is OpenR1-Math, then the coding problems)."""
    math = [{"problem": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(40)]
    code = [{"statement": f"Print {i}.", "cases": [{"type": "stdin_stdout", "input": "", "output": f"{i}\n"}]}
            for i in range(40)]
    sources = {"rl_prompts": [
        {"path": _write(tmp_path / "math.parquet", math), "fields": {"prompt": "problem", "solution": "answer"}},
        {"path": _write(tmp_path / "code.parquet", code), "fields": {"prompt": "statement", "tests": "cases"},
         "domain": "code"}]}
    tables, _, _ = prepare(PrepareConfig(output_dir=str(tmp_path / "out"), sources=json.dumps(sources)))
    rows = tables["rl_prompts"]
    assert len(rows) == 80 and {row["domain"] for row in rows[:16]} == {"math", "code"}
    again, _, _ = prepare(PrepareConfig(output_dir=str(tmp_path / "out"), sources=json.dumps(sources)))
    assert [row["prompt"] for row in again["rl_prompts"]] == [row["prompt"] for row in rows]  # seeded


def test_an_edited_local_data_set_is_read_again(tmp_path):
    """`datasets` served the rows of an edited local directory with named configs from its cache."""
    from tests.rehearsal.hub import named_configs

    repo = tmp_path / "org" / "set"
    sources = json.dumps({"rl_prompts": [{"path": str(repo), "name": "default",
                                          "fields": {"prompt": "q", "solution": "a"}}]})
    for rows in (2, 3):
        named_configs(repo, {"default": {"train": [{"q": f"What is {i} + 1?", "a": str(i + 1)} for i in range(rows)]}})
        tables, _, _ = prepare(PrepareConfig(output_dir="unused", sources=sources))
        assert len(tables["rl_prompts"]) == rows


MY_ROWS = [{"uid": i, "question": f"Ben has {i} pens and gets 1 more. How many pens?", "final_answer": str(i + 1)}
           for i in range(3)]


def _write_as(path, rows):
    """`rows` in the file type of `path`'s extension."""
    if path.suffix == ".parquet":
        return _write(path, rows)
    if path.suffix == ".csv":
        columns = list(rows[0])
        path.write_text("\n".join([",".join(columns)] + [",".join(str(r[c]) for c in columns) for r in rows]) + "\n")
    elif path.suffix == ".json":
        path.write_text(json.dumps(rows))
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.mark.parametrize("name", ["my_eval.jsonl", "prompts.json", "prompts.csv", "prompts.parquet"])
def test_a_local_file_is_read_by_its_extension_as_the_split_its_source_names(tmp_path, name):
    """`datasets` would make `my_eval.jsonl` a `test` split and fail on `train`; a .jsonl path was not read at all."""
    path = _write_as(tmp_path / name, MY_ROWS)
    fields = {"prompt": "question", "solution": "final_answer"}
    tables, counts, _ = prepare(PrepareConfig(output_dir="unused", sources=json.dumps(
        {"rl_prompts": [{"path": path, "fields": fields}]})))
    assert [(r["prompt"], r["solution"]) for r in tables["rl_prompts"]] == \
        [(r["question"], r["final_answer"]) for r in MY_ROWS]
    assert counts["revisions"] == {"rl_prompts": ["local"]}


def test_an_unreadable_source_is_one_line_naming_the_set_the_file_the_line_and_the_fix(tmp_path):
    def error(path, fields=None, stem="rl_prompts"):
        sources = {stem: [{"path": str(path), "fields": fields or {"prompt": "question", "solution": "final_answer"}}]}
        with pytest.raises(ValueError) as raised:
            prepare(PrepareConfig(output_dir="unused", sources=json.dumps(sources)))
        assert "\n" not in str(raised.value)
        return str(raised.value)

    latin1 = tmp_path / "latin1.jsonl"
    latin1.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in MY_ROWS[:2]) + "caf\xe9\n".encode("latin-1"))
    assert error(latin1) == (f"rl_prompts: {latin1} line 3: not UTF-8 (byte 0xe9 at column 4); save the file as "
                             "UTF-8")
    typo = _write_as(tmp_path / "typo.jsonl", MY_ROWS)
    assert error(typo, {"prompt": "question", "solution": "answer"}) == (
        f"rl_prompts: {typo} has no column fields.solution: 'answer'; its columns: uid, question, final_answer. "
        "Map each field to one of them")
    (tmp_path / "prompts.txt").write_text("What is 1 + 1?\n")
    assert error(tmp_path / "prompts.txt") == (
        f"rl_prompts: {tmp_path / 'prompts.txt'}: unknown file type '.txt'; a local source is a .jsonl, .json, "
        ".csv or .parquet file, or a directory of them")
    folder = tmp_path / "evals"
    folder.mkdir()
    _write_as(folder / "my_eval.jsonl", MY_ROWS)  # a directory is read as a hub repository
    assert error(folder, stem="eval_mine").startswith(f"eval_mine: {folder}: Unknown split \"train\". Should be one "
                                                      "of ['test']. `datasets` names a directory's splits")
    assert error(tmp_path / "missing.jsonl") == f"rl_prompts: {tmp_path / 'missing.jsonl'}: no such file or directory"


def test_every_row_left_out_is_named_in_the_rejects_file_counted_on_the_console_and_in_the_manifest(
        tmp_path, capsys):
    rows = MY_ROWS + [{"uid": 3, "question": "How many pens?", "final_answer": ""},
                      {"uid": 4, "question": "", "final_answer": "2"},
                      {"uid": 5, "question": "Quick: What is 7 times 8? Answer fast.", "final_answer": "56"}]
    mine = tmp_path / "mine.jsonl"
    mine.write_text("".join(json.dumps(r) + "\n" + ("\n" if i == 2 else "") for i, r in enumerate(rows)))
    evals = tmp_path / "eval_math.parquet"  # an evaluation set prepared in its own job (or generated)
    pq.write_table(pa.Table.from_pylist([{"id": "e0", "prompt": "What is 7 times 8?", "solution": "56", "level": 1,
                                          "domain": "math", "worked_solution": "", "tests": None}]), evals)
    out = tmp_path / "prepare_data" / "rl_prompts"
    sources = {"rl_prompts": [{"path": str(mine), "fields": {"prompt": "question", "solution": "final_answer"}}]}
    main(["--output_dir", str(out), "--sources", json.dumps(sources), "--eval_data", str(evals)])
    rejects = [json.loads(line) for line in (out / "rl_prompts.rejects.jsonl").read_text().splitlines()]
    assert [(r["file"], r["line"], r["reason"]) for r in rejects] == [  # line 4 is blank
        (str(mine), 5, "empty or missing gold answer"), (str(mine), 6, "empty or missing prompt"),
        (str(mine), 7, "shares an n-gram with an evaluation prompt (decontamination)")]
    assert len(read_table(out / "rl_prompts.parquet", "reasoning")) == 3
    assert capsys.readouterr().out.splitlines()[-1] == (
        "rl_prompts: kept 3 rows; dropped 2 bad (1 empty or missing gold answer, 1 empty or missing prompt); "
        f"decontaminated 1; rejects: {out / 'rl_prompts.rejects.jsonl'}")
    manifest = read_manifest(out)
    assert manifest["metrics"]["bad_rows_dropped"] == {"rl_prompts: empty or missing gold answer": 1,
                                                       "rl_prompts: empty or missing prompt": 1}
    assert manifest["metrics"]["decontaminated"] == {"rl_prompts": 1}
    assert manifest["metrics"]["rejects"] == {"rl_prompts": "rl_prompts.rejects.jsonl"}
    assert set(manifest["inputs"]) == {"rl_prompts[0]", "eval_math"}  # with their sha256
