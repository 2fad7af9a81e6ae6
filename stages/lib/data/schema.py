"""One parquet schema per kind of data set (data/README.md documents them), and their readers."""

import bisect
import json
import re
from pathlib import Path

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


# How prepare_data writes a set (write_rows), so that a reader of a few rows holds a few rows: a row group
# is what a reader decodes at once (64 code rows of the real set's ~145 KB of tests: ~9 MB; pyarrow's
# default is a million rows), and long unique texts are stored plain (a dictionary page of them is as large
# as the group and inflates every read: bench/code_tests.py).
ROW_GROUP_ROWS = 64
DICTIONARY_COLUMNS = ["domain", "level", "split"]


def write_rows(rows: list[dict], kind: str, path) -> None:
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMAS[kind]), path, row_group_size=ROW_GROUP_ROWS,
                   use_dictionary=DICTIONARY_COLUMNS)


def write_tables(tables: dict[str, list[dict]], directory) -> None:
    """One parquet file per data set, `<directory>/<stem>.parquet`."""
    for stem, rows in tables.items():
        write_rows(rows, kind_of(stem), Path(directory) / f"{stem}.parquet")


def open_parquet(path) -> pq.ParquetFile:
    """A file read a row group at a time, page by page (not each column chunk whole)."""
    return pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20)


def missing_columns(path, names: list[str], kind: str) -> list[str]:
    """The optional columns of `kind` a file lacks; a missing required one is an error naming the file."""
    expected, optional = SCHEMAS[kind], OPTIONAL_COLUMNS.get(kind, set())
    missing = [name for name in expected.names if name not in names]
    required = [name for name in missing if name not in optional]
    if required:
        raise ValueError(f"{path}: not a '{kind}' data set, missing column(s) {required} (has {names})")
    return missing


def read_table(path, kind: str) -> pa.Table:
    """Reads a parquet file and checks it has the columns of `kind`, naming the file and what is missing."""
    table = pq.read_table(path)
    for name in missing_columns(path, table.column_names, kind):
        field = SCHEMAS[kind].field(name)
        table = table.append_column(field, pa.nulls(len(table), field.type))
    return table


def iter_rows(path, kind: str, batch_rows: int = 16):
    """(index, row) for every row of a parquet file of `kind`, decoding a few rows at a time: a reader that
    keeps only some columns of each row (a code row's `tests` left behind, `tests_at` in its place) never holds
    the whole file."""
    file = open_parquet(path)
    missing = missing_columns(path, file.schema_arrow.names, kind)
    index = 0
    for batch in file.iter_batches(batch_size=batch_rows, use_threads=False):
        for row in batch.to_pylist():
            yield index, {**row, **dict.fromkeys(missing)}
            index += 1


def tests_at(path, index: int) -> str:
    """Where a code row's test cases are: `<parquet file>#<row>`, read back by TestCases."""
    return f"{Path(path).resolve()}#{index}"


class TestCases:
    """Code rows' test cases read from their parquet file when a reward needs them (`tests_at` references):
    the real code set holds ~145 KB of tests per row, ~5 GB in all, which every process of a GRPO job would
    otherwise hold whole. The last row group read from each file stays decoded (a batch's prompts come in
    groups of samples)."""

    __test__ = False  # not a pytest class

    def __init__(self):
        self.files: dict[str, tuple[pq.ParquetFile, list[int]]] = {}
        self.groups: dict[str, tuple[int, list]] = {}

    def __call__(self, reference: str) -> str:
        path, _, row = reference.rpartition("#")
        if path not in self.files:
            file = open_parquet(path)
            starts = [0]
            for group in range(file.num_row_groups):
                starts.append(starts[-1] + file.metadata.row_group(group).num_rows)
            self.files[path] = file, starts
        file, starts = self.files[path]
        group = bisect.bisect_right(starts, int(row)) - 1
        if self.groups.get(path, (None,))[0] != group:
            table = file.read_row_group(group, columns=["tests"], use_threads=False)
            self.groups[path] = group, table.column("tests").to_pylist()
        return self.groups[path][1][int(row) - starts[group]]


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
