"""Prepares a real config's data sets: downloads each configured Hugging Face data set once (on the
login node, rule `prepare_data`), maps its rows onto the pipeline's schemas, drops or rejects bad
rows, removes training prompts that overlap an evaluation set, and writes one parquet file per data
set. Compute jobs read only these files.

    python -m stages.data.prepare --output_dir results/qwen2.5-1.5b/data --sources '{"eval_math500": [...]}'

`--sources` maps a data-set file stem (`rl_prompts`, `cold_start`, `eval_aime24`, ...; see
stages/lib/data/schema.py for the kinds) to a list of sources, each a JSON object:

    path          hub id, or a local directory / parquet file (same loader)
    name, split, data_dir, revision   as `datasets.load_dataset` takes them
    format        `columns` (default): `fields` maps each schema field to a source column; a dotted
                  path reaches into nested values (`messages.-1.content`);
                  `gpqa`: multiple choice from Question / Correct Answer / Incorrect Answer 1-3
                  (choices shuffled with the seed, the gold answer is the letter);
                  `hh_rlhf`: Anthropic HH dialogues; prompt = all turns before the last reply
                  (preference pairs, or general prompts with the chosen reply as reference)
    fields        schema field -> source column (format `columns`); a reasoning set that maps `tests`
                  is code: its rows' test cases (a list, or JSON text of one) become the `tests`
                  column, each `{input, output}` (stdin/stdout; a `type` other than stdin_stdout is
                  a bad row) or `{assert}`, and `solution` stays empty
    solution_from_boxed   the gold answer is the last \\boxed{} of the mapped solution text
    domain        the rows' domain (default: `math` for reasoning, `code` when it maps `tests`,
                  `general` otherwise)
    split_as      preference rows: `train` or `eval` (held-out pairs)
    skip_rows, max_rows   take a slice of the source (after bad rows are dropped)
    exclude_rows  source row numbers (0-based) left out on purpose: the only way an evaluation set
                  (`eval_*`) loses a row, since a bad row there stops the rule whatever `on_bad_row` says

A gold answer must parse as math (math-verify) and must not be a placeholder (NuminaMath's `proof`,
`notfound`): such a row is bad.
"""

import hashlib
import json
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from stages.lib.artifacts import staged_output
from stages.lib.cli import parse_config, print_config
from stages.lib.data.schema import SCHEMAS, kind_of, normalize_prompt, parse_tests
from stages.lib.latex import last_boxed
from stages.lib.rewards.answers import CHOICE_INSTRUCTION, CHOICE_LETTERS

FORMATS = ("columns", "gpqa", "hh_rlhf")
SOURCE_KEYS = {"path", "name", "split", "data_dir", "revision", "format", "fields", "solution_from_boxed",
               "domain", "split_as", "skip_rows", "max_rows", "exclude_rows"}
DEFAULT_DOMAIN = {"reasoning": "math", "general": "general", "sft": "general", "preference": "general"}
# NuminaMath (OpenR1-Math's source) writes these where a problem has no checkable answer; math-verify parses
# them as symbols, so they would enter RL as gold answers no completion can match
PLACEHOLDER_ANSWERS = {"proof", "notfound"}
UNESCAPED_DOLLAR = re.compile(r"(?<!\\)\$")


class BadRow(ValueError):
    """A source row that cannot become a training or evaluation example. `reason` is what the
    manifest counts; `detail` adds the row's own value to the error message."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}{detail}")
        self.reason = reason


@dataclass
class PrepareConfig:
    output_dir: str = field(metadata={"help": "Where the parquet files and the manifest go."})
    sources: str = field(metadata={"help": "JSON: file stem -> list of sources (see the module doc)."})
    seed: int = field(default=0, metadata={"help": "Seeds the GPQA choice order and preference hold-out."})
    decontamination_ngram: int = field(default=10, metadata={
        "help": "Drop a training row sharing any word n-gram with an evaluation prompt (paper: 10-grams). 0: off."})
    decontamination_boilerplate: int = field(default=3, metadata={
        "help": "An n-gram in this many evaluation prompts or more is template text and does not count "
                "(0: all count)."})
    on_bad_row: str = field(default="drop", metadata={
        "help": "drop: skip and count rows without a prompt or gold answer; error: stop at the first, naming it."})
    preference_eval_share: float = field(default=0.05, metadata={
        "help": "Share of preference prompts held out when no source is `split_as: eval`."})

    def __post_init__(self):
        if self.on_bad_row not in ("drop", "error"):
            raise ValueError(f"on_bad_row must be 'drop' or 'error', not {self.on_bad_row!r}")

    def source_map(self) -> dict[str, list[dict]]:
        try:
            sources = json.loads(self.sources)
        except json.JSONDecodeError as error:
            raise ValueError(f"--sources is not JSON: {error}") from None
        for stem, items in sources.items():
            kind_of(stem)  # names the stem if it is not a known data set
            for index, source in enumerate(items):
                unknown = set(source) - SOURCE_KEYS
                if unknown or "path" not in source:
                    raise ValueError(f"sources.{stem}[{index}]: unknown key(s) {sorted(unknown)} or no `path` "
                                     f"(keys: {sorted(SOURCE_KEYS)})")
                excluded = source.get("exclude_rows", [])
                if not isinstance(excluded, list) or not all(isinstance(i, int) and i >= 0 for i in excluded):
                    raise ValueError(f"sources.{stem}[{index}].exclude_rows must be a list of row numbers")
                if source.get("format", "columns") not in FORMATS:
                    raise ValueError(f"sources.{stem}[{index}].format must be one of {FORMATS}")
        return sources


# ---- reading a source -------------------------------------------------------------------------

def load_source(source: dict):
    """The source's rows as a `datasets.Dataset`: a hub id, a local directory or a parquet file."""
    from datasets import load_dataset  # heavy import, only when preparing

    path, split = source["path"], source.get("split", "train")
    if path.endswith(".parquet"):
        return load_dataset("parquet", data_files={split: path}, split=split)
    # A local directory is converted afresh: `datasets` may serve an edited one from its cache (seen with a
    # directory declaring named configs in its README); a hub id's cache is keyed by its revision.
    local = Path(path).is_dir()
    return load_dataset(path, source.get("name"), split=split, data_dir=source.get("data_dir"),
                        revision=source.get("revision"), download_mode="force_redownload" if local else None,
                        verification_mode="no_checks" if local else None)  # its cached split sizes are stale too


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
        boxed = last_boxed(value)
        if boxed is None or not boxed.strip():
            raise BadRow("no \\boxed{} answer in the solution")
        value = boxed.strip()
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


def read_rows(stem: str, source_index: int, source: dict, seed: int, on_bad_row: str,
              bad: Counter, rows_of=load_source) -> list[dict]:
    kind = kind_of(stem)
    skip, limit = source.get("skip_rows", 0), source.get("max_rows", 0)
    excluded = set(source.get("exclude_rows", []))
    rows, valid = [], 0
    for index, row in enumerate(rows_of(source)):
        if index in excluded:
            continue
        try:
            converted = convert(row, kind, source, seed)
        except BadRow as problem:
            where = f"{stem}: row {index} of {source['path']} ({source.get('split', 'train')}): {problem}"
            if stem.startswith("eval_"):  # scores must be over the published set, or say which rows they leave
                raise ValueError(f"{where}. An evaluation set never drops a row: fix the source, or leave the row "
                                 f"out on purpose with `exclude_rows: [{index}]` in this source") from None
            if on_bad_row == "error":
                raise ValueError(f"{where} (set on_bad_row: drop to skip such rows)") from None
            bad[f"{stem}: {problem.reason}"] += 1
            continue
        valid += 1
        if valid <= skip:
            continue
        if kind != "corpus":
            converted["id"] = f"{stem}-{source_index}-{index}"
        rows.append(converted)
        if limit and len(rows) >= limit:
            break
    return rows


# ---- decontamination -------------------------------------------------------------------------

def words(text_: str) -> list[str]:
    return re.findall(r"\w+", text_.lower())


def ngrams(tokens: list[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)}


def prompt_texts(row: dict, kind: str) -> list[str]:
    if kind == "sft":
        return [m["content"] for m in row["messages"] if m["role"] == "user"]
    if kind == "corpus":
        return [row["text"]]
    return [row["prompt"]]


class Decontaminator:
    """Flags a training text that shares a word n-gram with any evaluation prompt, or contains a whole
    evaluation prompt shorter than n words. An n-gram found in `boilerplate_prompts` or more evaluation
    prompts is the benchmark's template ("the first line of the input contains a single integer"), not
    a problem, and does not count (0: every n-gram counts)."""

    def __init__(self, eval_prompts: list[str], n: int, boilerplate_prompts: int = 0):
        self.n = n
        tokenized = [words(p) for p in eval_prompts] if n else []
        prompts_with = Counter(gram for tokens in tokenized for gram in ngrams(tokens, n))
        self.eval_ngrams = {gram for gram, count in prompts_with.items()
                            if not boilerplate_prompts or count < boilerplate_prompts}
        self.short_prompts = {" ".join(tokens) for tokens in tokenized if 0 < len(tokens) < n}

    def overlaps(self, training_text: str) -> bool:
        if not self.n:
            return False
        tokens = words(training_text)
        if not ngrams(tokens, self.n).isdisjoint(self.eval_ngrams):
            return True
        joined = f" {' '.join(tokens)} "
        return any(f" {p} " in joined for p in self.short_prompts)


def hold_out_preferences(rows: list[dict], share: float, seed: int) -> None:
    """Without an eval source, hold out a share of the prompts (all pairs of a prompt go together)."""
    if any(r["split"] == "eval" for r in rows):
        return
    for row in rows:
        digest = hashlib.sha256(f"{seed}:{normalize_prompt(row['prompt'])}".encode()).digest()
        row["split"] = "eval" if int.from_bytes(digest[:8], "big") / 2**64 < share else "train"


def prepare(config: PrepareConfig, rows_of=load_source) -> tuple[dict[str, list[dict]], dict]:
    """Every configured data set, decontaminated; and the counts for the manifest."""
    tables, bad = {}, Counter()
    for stem, sources in config.source_map().items():
        tables[stem] = []
        for index, source in enumerate(sources):
            tables[stem] += read_rows(stem, index, source, config.seed, config.on_bad_row, bad, rows_of)
        if not tables[stem]:
            raise ValueError(f"{stem}: no usable rows in {[s['path'] for s in sources]}")
    eval_prompts = [p for stem, rows in tables.items() if stem.startswith("eval_")
                    for row in rows for p in prompt_texts(row, kind_of(stem))]
    decontaminator = Decontaminator(eval_prompts, config.decontamination_ngram, config.decontamination_boilerplate)
    removed = {}
    for stem, rows in tables.items():
        if stem.startswith("eval_"):
            continue
        kept = [r for r in rows if not any(decontaminator.overlaps(t) for t in prompt_texts(r, kind_of(stem)))]
        removed[stem] = len(rows) - len(kept)
        tables[stem] = kept
        if kind_of(stem) == "preference":
            hold_out_preferences(kept, config.preference_eval_share, config.seed)
        elif len(config.source_map()[stem]) > 1:
            # Sources one after another would give a stage that takes the first N rows (generation's and
            # GRPO's max_prompts) the first source alone: math and no code.
            random.Random(f"{config.seed}:{stem}").shuffle(kept)
    counts = {"rows": {stem: len(rows) for stem, rows in tables.items()},
              "decontaminated": removed, "bad_rows_dropped": dict(bad)}
    return tables, counts


def write_tables(tables: dict[str, list[dict]], directory: Path) -> None:
    for stem, rows in tables.items():
        pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMAS[kind_of(stem)]), directory / f"{stem}.parquet")


def main(argv=None):
    config = parse_config(PrepareConfig, argv)
    print_config(config)
    with staged_output(config.output_dir, "prepare_data", config, inputs={}) as (scratch, headline):
        tables, counts = prepare(config)
        write_tables(tables, Path(scratch))
        headline.update(counts)
    print(json.dumps(counts, indent=2))


if __name__ == "__main__":
    main()
