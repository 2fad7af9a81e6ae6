import json
import random
import re
import subprocess
import sys
from collections import Counter

import pyarrow.parquet as pq
import pytest

from stages.data.tiny import TinyDataConfig, _unique_problems, generate, held_out_overlaps
from stages.lib.data import general
from stages.lib.data.arithmetic import make_problem, solve
from stages.lib.data.programs import make_code_problem
from stages.lib.data.schema import FILES, SCHEMAS, normalize_prompt, parse_tests, read_table
from stages.lib.rewards.code import extract_program, same_output
from stages.lib.templates import CHAT
from stages.lib.tokenizer import chat_template_renderer
from tests.conftest import SMALL_DATA


def _generate(seed):
    return generate(TinyDataConfig(output_dir="unused", seed=seed, **SMALL_DATA), chat_template_renderer())


def test_same_seed_same_data_other_seed_other_data():
    first, second, other = _generate(3), _generate(3), _generate(4)
    assert first == second
    assert first["rl_prompts"] != other["rl_prompts"]
    assert first["pretrain"] != other["pretrain"]


def test_held_out_prompts_never_appear_in_training_data():
    tables = _generate(0)
    assert len({normalize_prompt(r["prompt"]) for r in tables["eval_math"]}) == SMALL_DATA["num_eval_math"]
    assert len({normalize_prompt(r["prompt"]) for r in tables["eval_code"]}) == SMALL_DATA["num_eval_code"]
    assert held_out_overlaps(tables) == []


@pytest.mark.parametrize("held_out", ["eval_math", "eval_code"])
@pytest.mark.parametrize("table, make_row", [
    ("rl_prompts", lambda p: {"prompt": p.upper() + "  "}),
    ("cold_start", lambda p: {"messages": [{"role": "user", "content": p + " Please reason step by step."}]}),
    ("pretrain", lambda p: {"text": f"Problem: {p}\nSolution: 1 + 1 = 2."}),
])
def test_the_overlap_check_catches_a_planted_held_out_prompt(table, make_row, held_out):
    tables = _generate(0)
    planted = tables[held_out][3]["prompt"]
    tables[table].append(make_row(planted))
    assert held_out_overlaps(tables) == [normalize_prompt(planted)]


def test_worked_solutions_reach_the_gold_answer_and_levels_count_steps():
    for row in _generate(1)["rl_prompts"]:
        if row["domain"] == "code":
            continue
        steps = row["worked_solution"].split("\n")
        assert solve(steps) == int(row["solution"])
        assert len(steps) == row["level"]
        assert 0 <= int(row["solution"]) <= 99


def test_numbers_stay_within_the_configured_range_in_problems_and_drills():
    tables = generate(TinyDataConfig(output_dir="unused", seed=2, max_value=40, max_amount=6, drill_facts=20,
                                     drill_share=0.4, **SMALL_DATA), chat_template_renderer())
    math_rows = [r for r in tables["rl_prompts"] if r["domain"] == "math"] + tables["eval_math"]
    equations = [step for row in math_rows for step in row["worked_solution"].split("\n")]
    fact = r"\d+ [-+*] \d+ = \d+"
    drills = [doc["text"] for doc in tables["pretrain"] if re.fullmatch(rf"({fact}\. ?)+", doc["text"])]
    assert len(drills) > 0.3 * SMALL_DATA["num_pretrain_docs"]
    equations += [equation for drill in drills for equation in re.findall(fact, drill)]
    for equation in equations:
        left, op, right, _, result = equation.split(" ")
        assert max(int(left), int(right), int(result)) <= 40, equation
        if op == "-":
            assert int(right) <= 6, equation
    math_pairs = [row for row in tables["preferences_helpful"] if row["domain"] == "math"]
    assert math_pairs and all(int(re.search(r"boxed\{(\d+)\}", row["chosen"]).group(1)) <= 40 for row in math_pairs)


@pytest.mark.parametrize("bad", [dict(drill_share=0.5), dict(max_value=20), dict(max_amount=1),
                                 dict(pretrain_level_weights=[1.0, 1.0]), dict(pretrain_level_weights=[0, 0, 0]),
                                 dict(distractor_share=1.5), dict(cold_start_distractor_share=-0.5),
                                 dict(think_format_share=-0.1)])
def test_out_of_range_number_and_drill_settings_are_refused(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        TinyDataConfig(output_dir="unused", **bad)


def test_each_training_set_draws_its_own_levels_and_the_evaluation_set_all():
    tables = generate(TinyDataConfig(output_dir="unused", seed=0, levels=[1, 2, 3, 4, 5], cold_start_levels=[1, 2],
                                     rl_levels=[3, 4, 5], **SMALL_DATA), chat_template_renderer())
    assert {row["level"] for row in tables["eval_math"]} == {1, 2, 3, 4, 5}
    assert {row["level"] for row in tables["rl_prompts"] if row["domain"] == "math"} == {3, 4, 5}
    cold_math = [row for row in tables["cold_start"] if row["domain"] == "math"]
    assert cold_math and all(len(re.findall(r" = ", row["messages"][-1]["content"])) <= 2 for row in cold_math)
    assert held_out_overlaps(tables) == []


def test_corpus_level_weights_set_each_levels_share():
    rng = random.Random(0)
    problems = _unique_problems(rng, 2000, [1, 2, 3], weights=[6, 2, 0])
    counts = Counter(p.level for p in problems)
    assert counts[3] == 0 and 0.65 < counts[1] / 2000 < 0.85


def test_think_format_share_writes_chat_math_documents_in_the_cold_start_format():
    def think_documents(share):
        corpus = generate(TinyDataConfig(output_dir="unused", seed=0, think_format_share=share, **SMALL_DATA),
                          chat_template_renderer())["pretrain"]
        return [row["text"] for row in corpus if "<think>\n" in row["text"]], len(corpus)

    assert think_documents(0.0)[0] == []  # the default base has never seen the cold-start format
    documents, corpus_size = think_documents(1.0)
    assert 0.05 < len(documents) / corpus_size < 0.15  # every chat math document: a tenth of the corpus
    assert all(re.search(r"</think>\n\nThe answer is \\boxed\{\d+\}\.", text) for text in documents)


def _sentences(prompt):
    return re.split(r"(?<=[.?]) ", prompt)


@pytest.mark.parametrize("level", [2, 4, 6])
def test_a_distractor_adds_one_sentence_and_leaves_the_solution_alone(level):
    rng = random.Random(level)
    for _ in range(100):
        problem = make_problem(rng, level, 50, 9, distractor_share=1.0)
        plain_sentences = 2 + sum(1 for step in problem.steps if step.sentence)
        assert len(_sentences(problem.prompt)) == plain_sentences + 1
        assert solve(problem.worked_steps) == problem.answer and len(problem.steps) == level
    one_step = [make_problem(rng, 1, 50, 9, distractor_share=1.0) for _ in range(50)]
    assert all(len(_sentences(p.prompt)) == 3 for p in one_step)  # level 1 stays a one-operation problem


def _has_distractor(prompt):
    # the distractor sentences of stages.lib.data.arithmetic: another person's count, or things seen in a shop
    return any(re.match(r"[A-Z][a-z]+ has \d+", sentence) or re.search(r"sees \d+ \w+ in a shop", sentence)
               for sentence in _sentences(prompt)[1:])


def test_a_cold_start_without_distractors_leaves_them_to_the_rl_pool_and_the_evaluation_set():
    config = TinyDataConfig(output_dir="unused", seed=0, distractor_share=1.0, cold_start_distractor_share=0.0,
                            **SMALL_DATA)
    tables = generate(config, chat_template_renderer())
    cold_prompts = [row["messages"][0]["content"] for row in tables["cold_start"] if row["domain"] == "math"]
    deep = [row["prompt"] for name in ("rl_prompts", "eval_math") for row in tables[name]
            if row["domain"] == "math" and row["level"] >= 2]
    assert cold_prompts and not any(_has_distractor(prompt) for prompt in cold_prompts)
    assert deep and all(_has_distractor(prompt) for prompt in deep)
    default = generate(TinyDataConfig(output_dir="unused", seed=0, distractor_share=1.0, **SMALL_DATA),
                       chat_template_renderer())  # the cold start follows distractor_share unless told otherwise
    deep_cold = [row["messages"][0]["content"] for row in default["cold_start"]
                 if row["domain"] == "math" and row["messages"][-1]["content"].count(" = ") >= 2]
    assert deep_cold and all(_has_distractor(prompt) for prompt in deep_cold)


@pytest.mark.parametrize("level", [1, 2, 3, 4, 5, 6])
def test_every_level_can_be_generated(level):
    rng = random.Random(level)
    problems = [make_problem(rng, level) for _ in range(50)]
    assert all(len(p.steps) == level for p in problems)


def test_general_instructions_cover_every_domain_with_references():
    rng = random.Random(0)
    items = [general.make_instruction(rng) for _ in range(400)]
    assert {d for d, _, _ in items} == set(general.DOMAINS)
    assert all(prompt and reference for _, prompt, reference in items)


def passes(program: str, case: dict) -> bool:
    """Runs one of the generator's own programs (trusted: no sandbox) on one test case."""
    if "assert" in case:
        return subprocess.run([sys.executable, "-c", program + "\n" + case["assert"]]).returncode == 0
    run = subprocess.run([sys.executable, "-c", program], input=case["input"], capture_output=True, text=True)
    return run.returncode == 0 and same_output(run.stdout, case["output"])


def test_code_rows_reference_programs_pass_their_tests_and_a_constant_fails_them():
    tables = _generate(1)
    rows = [r for r in tables["rl_prompts"] if r["domain"] == "code"] + tables["eval_code"]
    assert len(rows) == SMALL_DATA["num_rl_code"] + SMALL_DATA["num_eval_code"]
    for row in rows:
        assert row["solution"] == ""
        cases = parse_tests(row["tests"])
        assert len(cases) == 3 and all(passes(row["worked_solution"], case) for case in cases), row
        constant = "print(0)" if "input" in cases[0] else "def f(*args):\n    return 0"
        assert not all(passes(constant, case) for case in cases)


@pytest.mark.parametrize("level", [1, 2, 3, 4])
def test_code_problems_have_level_operations_and_distinct_test_inputs(level):
    rng = random.Random(level)
    for problem in [make_code_problem(rng, level) for _ in range(50)]:
        expression = problem.program.splitlines()[-1]
        assert sum(expression.count(f" {op} ") for op in "+-*") == level
        keys = [json.dumps(case, sort_keys=True) for case in problem.tests]
        assert len(set(keys)) == len(keys)


def test_cold_start_conversations_end_with_a_think_summary_answer_boxed_or_a_program():
    rows = _generate(0)["cold_start"]
    assert {row["domain"] for row in rows} == {"math", "code"}
    for row in rows:
        user, assistant = row["messages"]
        assert user["role"] == "user" and assistant["role"] == "assistant"
        assert assistant["content"].startswith("<think>\n")
        if row["domain"] == "math":
            assert "\\boxed{" in assistant["content"]
        else:
            assert "```python" in user["content"]  # the code instruction
            assert extract_program(assistant["content"], CHAT)


def test_parquet_files_have_their_documented_schema(small_data_dir):
    for stem, kind in FILES.items():
        table = read_table(small_data_dir / f"{stem}.parquet", kind)
        assert table.schema.equals(SCHEMAS[kind]), stem
        assert table.num_rows > 0


def test_reading_a_file_of_the_wrong_kind_names_file_and_missing_columns(small_data_dir):
    path = small_data_dir / "general.parquet"
    with pytest.raises(ValueError, match=r"general\.parquet.*missing column\(s\) \['solution'"):
        read_table(path, "reasoning")
    assert pq.read_table(path).num_rows == SMALL_DATA["num_general"]


def test_sets_prepared_from_sources_are_not_written(tmp_path):
    """With data.hub.sets beside data.tiny, the generator writes only the other sets (a prepared set's file is
    elsewhere)."""
    from stages.data.tiny import main

    small = [f"--{key}={value}" for key, value in SMALL_DATA.items()]
    main(["--output_dir", str(tmp_path / "data"), "--sets", "eval_math", "general", *small])
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["eval_math.parquet", "general.parquet",
                                                                    "manifest.json"]
    assert len(read_table(tmp_path / "data" / "eval_math.parquet", "reasoning")) == SMALL_DATA["num_eval_math"]
    with pytest.raises(ValueError, match=r"sets: unknown data set\(s\) \['rl_prompt'\]"):
        TinyDataConfig(output_dir="unused", sets=["rl_prompt"])
