"""One parquet schema per kind of data set (data/README.md documents them), and their readers."""

import json
import re

import pyarrow as pa
import pyarrow.parquet as pq

MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string())])

SCHEMAS = {
    # Verifiable reasoning problems: RL prompts, rejection-sampling prompts, evaluation sets. Code rows
    # have `tests` (JSON test cases, stages/lib/rewards/code.py) and an empty `solution`.
    "reasoning": pa.schema([("id", pa.string()), ("prompt", pa.string()), ("solution", pa.string()),
                            ("level", pa.int64()), ("domain", pa.string()), ("worked_solution", pa.string()),
                            ("tests", pa.string())]),
    # Non-reasoning instructions with a reference answer.
    "general": pa.schema([("id", pa.string()), ("prompt", pa.string()), ("reference", pa.string()),
                          ("domain", pa.string())]),
    # Conversations for SFT: the last message is the assistant's target.
    "sft": pa.schema([("id", pa.string()), ("domain", pa.string()), ("messages", pa.list_(MESSAGE))]),
    # Preference pairs for a reward model; `split` is train or eval (prompts never shared).
    "preference": pa.schema([("id", pa.string()), ("prompt", pa.string()), ("chosen", pa.string()),
                             ("rejected", pa.string()), ("domain", pa.string()), ("split", pa.string())]),
    # Raw pre-training text.
    "corpus": pa.schema([("text", pa.string())]),
}

# Columns a file may lack (math-only sets written before code rows existed, or brought by the user):
# they read as nulls.
OPTIONAL_COLUMNS = {"reasoning": {"tests"}}

FILES = {  # file stem -> schema kind
    "rl_prompts": "reasoning", "cold_start": "sft", "general": "general", "eval_math": "reasoning",
    "eval_code": "reasoning",
    "eval_general": "general", "pretrain": "corpus", "preferences_helpful": "preference",
    "preferences_harmless": "preference", "rl_general": "general",
}


def normalize_prompt(prompt: str) -> str:
    """The key under which two prompts count as the same (overlap checks, dedup)."""
    return re.sub(r"\s+", " ", prompt).strip().lower()


def read_table(path, kind: str) -> pa.Table:
    """Reads a parquet file and checks it has the columns of `kind`, naming the file and what is missing."""
    table = pq.read_table(path)
    expected, optional = SCHEMAS[kind], OPTIONAL_COLUMNS.get(kind, set())
    missing = [name for name in expected.names if name not in table.column_names]
    required = [name for name in missing if name not in optional]
    if required:
        raise ValueError(f"{path}: not a '{kind}' data set, missing column(s) {required} (has {table.column_names})")
    for name in missing:
        table = table.append_column(expected.field(name), pa.nulls(len(table), expected.field(name).type))
    return table


def kind_of(stem: str) -> str:
    """The schema kind of a data-set file: a fixed name, or `eval_<set>` (a reasoning set, unless listed)."""
    if stem in FILES:
        return FILES[stem]
    if stem.startswith("eval_"):
        return "reasoning"
    raise ValueError(f"unknown data set '{stem}': expected one of {sorted(FILES)} or eval_<name>")


def parse_tests(tests) -> list[dict]:
    """The row's cases; ValueError naming what is wrong with them."""
    if isinstance(tests, str):
        try:
            tests = json.loads(tests)
        except json.JSONDecodeError as error:
            raise ValueError(f"tests are not JSON ({error.msg})") from None
    if not isinstance(tests, list) or not tests:
        raise ValueError("tests must be a non-empty list of cases")
    for number, case in enumerate(tests):
        if not isinstance(case, dict) or not ({"input", "output"} <= case.keys() or "assert" in case):
            raise ValueError(f"test case {number} is neither {{input, output}} nor {{assert}}: {case!r}"[:200])
    return tests
