"""Opening a data source (`load_source`) and mapping its rows onto the pipeline's schemas: the columns a
source names (`fields`, dotted paths into nested values), its format (`columns`, `gpqa`, `hh_rlhf`), gold
answers that must parse and must not be placeholders, code test cases. `prepare_data`
(stages/data/prepare.py) converts every row with it, the hub probe (stages/hub_probe.py) the first rows of
each source; a row it cannot use raises BadRow."""

import csv
import json
import random
import re
from pathlib import Path

from stages.lib.data.schema import parse_tests
from stages.lib.latex import boxed_answers, one_answer
from stages.lib.templates import CHOICE_INSTRUCTION, CHOICE_LETTERS

DEFAULT_DOMAIN = {"reasoning": "math", "general": "general", "sft": "general", "preference": "general"}
# NuminaMath (OpenR1-Math's source) writes these where a problem has no checkable answer; math-verify parses
# them as symbols, so they would enter RL as gold answers no completion can match
PLACEHOLDER_ANSWERS = {"proof", "notfound"}
UNESCAPED_DOLLAR = re.compile(r"(?<!\\)\$")


# A local file is read by the `datasets` loader of its extension, as the split its source names (a file's name
# never picks its split: `datasets` would make `my_eval.jsonl` a `test` split).
FILE_LOADERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
TEXT_FILES = (".jsonl", ".json", ".csv")
LOCAL_PATH_PREFIXES = ("/", "./", "../", "~")  # a path written so is never a hub id


class SourceError(ValueError):
    """A source that cannot be read as given: the message names the file (and line) and the fix."""


def local_path(path: str) -> Path | None:
    """The local file or directory a source's `path` names; None for a hub id. A path that looks local
    (a data file's extension, or written as a path) but is not there is an error."""
    if Path(path).exists():
        return Path(path)
    if path.startswith(LOCAL_PATH_PREFIXES) or Path(path).suffix in FILE_LOADERS:
        raise SourceError(f"{path}: no such file or directory")
    return None


def local_files(path: Path) -> list[Path]:
    """The files a local source reads (a directory's, hidden ones aside): what the workflow tracks as its inputs."""
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file()
                  and not any(part.startswith(".") for part in p.relative_to(path).parts))


def check_file_type(file: Path) -> None:
    if file.suffix not in FILE_LOADERS:
        raise SourceError(f"{file}: unknown file type '{file.suffix}'; a local source is a .jsonl, .json, .csv or "
                          ".parquet file, or a directory of them")


def check_local_files(path: Path) -> None:
    """A local file's type, and every text file's encoding, line by line: `datasets` would stop on a bad byte with
    a pyarrow traceback naming neither file nor line."""
    if path.is_file():
        check_file_type(path)
    for file in local_files(path):
        if file.suffix not in TEXT_FILES:
            continue
        with open(file, "rb") as lines:
            for number, line in enumerate(lines, 1):
                try:
                    line.decode("utf-8")
                except UnicodeDecodeError as error:
                    raise SourceError(f"{file} line {number}: not UTF-8 (byte {line[error.start]:#04x} at column "
                                      f"{error.start + 1}); save the file as UTF-8") from None


def row_lines(path: Path) -> list[int] | None:
    """The line each row of a local .jsonl or .csv file starts on (1-based), so that a rejected row can be found in
    an editor; None for other sources (their rows are named by number)."""
    if not path.is_file() or path.suffix not in (".jsonl", ".csv"):
        return None
    with open(path, encoding="utf-8", newline="") as f:
        if path.suffix == ".jsonl":  # blank lines hold no row
            return [number for number, line in enumerate(f, 1) if line.strip()]
        reader, starts = csv.reader(f), []
        next(reader, None)  # the header
        start = reader.line_num + 1
        for _ in reader:  # a quoted value may span lines
            starts.append(start)
            start = reader.line_num + 1
        return starts


def load_source(source: dict, streaming: bool = False):
    """The source's rows as a `datasets.Dataset` (an IterableDataset when `streaming`): a hub id, a local data file
    (.jsonl, .json, .csv, .parquet) or a local directory (read as `datasets` reads a hub repository: its README's
    configs, its files' names as splits). SourceError names the file when it cannot be read."""
    from datasets import load_dataset  # heavy import, only when preparing or probing

    path, split = source["path"], source.get("split", "train")
    local = local_path(path)
    if local is not None:
        check_local_files(local)
    # A local source is converted afresh: `datasets` may serve an edited one from its cache (seen with a directory
    # declaring named configs in its README); a hub id's cache is keyed by its revision. A stream has no cache.
    fresh = {"download_mode": "force_redownload", "verification_mode": "no_checks"} \
        if local is not None and not streaming else {}
    if local is not None and local.is_file():
        return load_dataset(FILE_LOADERS[local.suffix], data_files={split: str(local)}, split=split,
                            streaming=streaming, **fresh)
    try:
        return load_dataset(path, source.get("name"), split=split, data_dir=source.get("data_dir"),
                            revision=source.get("revision"), streaming=streaming, **fresh)
    except ValueError as error:
        if local is None or not str(error).startswith("Unknown split"):
            raise
        raise SourceError(f"{path}: {error} `datasets` names a directory's splits after its files' names (train, "
                          "test, eval, validation, ...): set `split:` in this source to the one you mean, or give "
                          "one file as `path` (a file is read as the split its source names)") from None


class BadRow(ValueError):
    """A source row that cannot become a training or evaluation example. `reason` is what the
    manifest counts; `detail` adds the row's own value to the error message."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}{detail}")
        self.reason = reason


def lookup(row: dict, dotted: str):
    """`messages.-1.content` -> row["messages"][-1]["content"]; a missing step is a bad row."""
    value = row
    for step in dotted.split("."):
        try:
            value = value[int(step)] if isinstance(value, list) else value[step]
        except (KeyError, IndexError, ValueError, TypeError):
            raise BadRow(f"no '{dotted}'", f" (stops at '{step}')") from None
    return value


def text(value, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise BadRow(f"empty or missing {what}")
    return value.strip()


def gold_answer(value, from_boxed: bool) -> str:
    value = text(value if not isinstance(value, (int, float)) else str(value), "gold answer")
    if from_boxed:
        boxes = boxed_answers(value)  # the last first
        if not boxes or not boxes[0].strip():
            raise BadRow("no \\boxed{} answer in the solution")
        if one_answer(boxes) is None:
            # "\boxed{1} and \boxed{-2}": the last box alone would be a part of the answer as gold, and the
            # whole answer wrong; a completion boxing several answers has none (answers.py one_answer)
            raise BadRow("several different \\boxed{} answers in the solution")
        value = boxes[0].strip()
    if value.lower() in PLACEHOLDER_ANSWERS:
        raise BadRow("gold answer is a placeholder", f": {value!r}")
    if not parses_as_answer(value):
        raise BadRow("gold answer cannot be parsed", f": {value[:60]!r}")
    return value


def parses_as_answer(answer: str) -> bool:
    """Whether math-verify finds an answer in the gold string (a letter or a word counts). Its parse
    returns [value, string] on success and only the string when nothing parsed. A string without math
    delimiters is wrapped in $...$; an escaped dollar (MATH-500's `\\$18.90`) is text, not a delimiter."""
    from math_verify import parse

    delimited = UNESCAPED_DOLLAR.search(answer) or "\\(" in answer
    return len(parse(answer if delimited else f"${answer}$", parsing_timeout=5)) > 1


def messages(value) -> list[dict]:
    if not isinstance(value, list) or not value:
        raise BadRow("messages is not a non-empty list")
    turns = []
    for message in value:
        if not isinstance(message, dict) or message.get("role") not in ("system", "user", "assistant"):
            raise BadRow("a message without a system/user/assistant role")
        turns.append({"role": message["role"], "content": text(message.get("content"), "message content")})
    if turns[-1]["role"] != "assistant" or not any(t["role"] == "user" for t in turns):
        raise BadRow("messages must contain a user turn and end with the assistant's")
    return turns


def hh_split(dialogue: str) -> tuple[str, str]:
    """An Anthropic HH transcript -> (prompt: every turn before the last reply, last reply)."""
    marker = "\n\nAssistant:"
    cut = dialogue.rfind(marker)
    if cut == -1:
        raise BadRow("no Assistant turn in the dialogue")
    prompt = re.sub(r"^\s*Human:\s*", "", dialogue[:cut].strip())
    return text(prompt, "prompt"), text(dialogue[cut + len(marker):], "reply")


def test_cases(value) -> str:
    """A code row's test cases as the `tests` column's JSON: stdin/stdout pairs and assert lines."""
    try:
        cases = parse_tests(json.loads(value) if isinstance(value, str) else value)
    except (ValueError, TypeError) as error:
        raise BadRow("unusable test cases", f": {str(error)[:80]}") from None
    converted = []
    for case in cases:
        if "assert" in case:
            converted.append({"assert": text(case["assert"], "assert test")})
            continue
        if case.get("type", "stdin_stdout") != "stdin_stdout":
            raise BadRow(f"test case type {case.get('type')!r} is not supported (stdin_stdout or assert)")
        if not isinstance(case["input"], str) or not isinstance(case["output"], str):
            raise BadRow("a test case's input or output is not text")
        converted.append({"input": case["input"], "output": case["output"]})
    return json.dumps(converted, ensure_ascii=False)


def gpqa_row(row: dict, seed: int) -> dict:
    question = text(row.get("Question"), "Question")
    correct = text(row.get("Correct Answer"), "Correct Answer")
    choices = [correct] + [text(row.get(f"Incorrect Answer {i}"), f"Incorrect Answer {i}") for i in (1, 2, 3)]
    rng = random.Random(f"{seed}:{question}")
    rng.shuffle(choices)
    options = "\n".join(f"{letter}) {choice}" for letter, choice in zip(CHOICE_LETTERS, choices))
    prompt = f"{question}\n\n{options}\n\n{CHOICE_INSTRUCTION}"
    return {"prompt": prompt, "solution": CHOICE_LETTERS[choices.index(correct)]}


def convert(row: dict, kind: str, source: dict, seed: int) -> dict:
    """One source row as a row of `kind` (without `id`); raises BadRow."""
    fmt, fields = source.get("format", "columns"), source.get("fields", {})
    is_code = kind == "reasoning" and "tests" in fields
    domain = source.get("domain", "code" if is_code else DEFAULT_DOMAIN.get(kind, "general"))
    get = lambda name, default=None: lookup(row, fields.get(name, default or name))  # noqa: E731
    if kind == "reasoning":
        level = re.search(r"\d+", str(row.get(fields.get("level", "level"), "")))  # 3, or MATH's "Level 3"
        shared = {"domain": domain, "level": int(level.group()) if level else 0,
                  "worked_solution": row.get(fields["worked_solution"], "") if "worked_solution" in fields else ""}
        if is_code:
            return {"prompt": text(get("prompt"), "prompt"), "solution": "", "tests": test_cases(get("tests")),
                    **shared}
        if fmt == "gpqa":
            converted = gpqa_row(row, seed)
        else:
            converted = {"prompt": text(get("prompt"), "prompt"), "solution": get("solution")}
        return {"prompt": converted["prompt"], **shared,
                "solution": gold_answer(converted["solution"], source.get("solution_from_boxed", False))}
    if kind == "general":
        if fmt == "hh_rlhf":  # e.g. harmful prompts for the final RL phase, the safe reply as reference
            prompt, reference = hh_split(text(row.get("chosen"), "chosen"))
        else:
            prompt, reference = text(get("prompt"), "prompt"), text(get("reference"), "reference")
        return {"prompt": prompt, "reference": reference, "domain": domain}
    if kind == "sft":
        if "messages" in fields or "prompt" not in fields:
            turns = messages(get("messages"))
        else:
            turns = messages([{"role": "user", "content": get("prompt")},
                              {"role": "assistant", "content": get("response")}])
        return {"domain": domain, "messages": turns}
    if kind == "preference":
        if fmt == "hh_rlhf":
            prompt, chosen = hh_split(text(row.get("chosen"), "chosen"))
            rejected_prompt, rejected = hh_split(text(row.get("rejected"), "rejected"))
            if rejected_prompt != prompt:
                raise BadRow("chosen and rejected dialogues differ before the last reply")
        else:
            prompt, chosen, rejected = (text(get(f), f) for f in ("prompt", "chosen", "rejected"))
        if chosen == rejected:
            raise BadRow("chosen and rejected are the same text")
        return {"prompt": prompt, "chosen": chosen, "rejected": rejected, "domain": domain,
                "split": source.get("split_as", "train")}
    if kind == "corpus":
        return {"text": text(get("text"), "text")}
    raise ValueError(f"unknown data kind {kind!r}")
