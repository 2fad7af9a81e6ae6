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

from stages.lib.artifacts import staged_output
from stages.lib.cli import parse_config, print_config
from stages.lib.data.schema import kind_of, normalize_prompt, write_tables
from stages.lib.data.sources import BadRow, convert, load_source
from stages.lib.hub import LOCAL, resolved_revision

FORMATS = ("columns", "gpqa", "hh_rlhf")
SOURCE_KEYS = {"path", "name", "split", "data_dir", "revision", "format", "fields", "solution_from_boxed",
               "domain", "split_as", "skip_rows", "max_rows", "exclude_rows"}


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


def at_resolved_revision(source: dict) -> tuple[dict, str]:
    """The source at the commit its id resolves to now (its `revision:`, else the main branch), so the rows
    read are those of the commit the manifest records; and that commit ("local" for a path here)."""
    if Path(source["path"]).exists():
        return source, LOCAL
    try:
        commit = resolved_revision(source["path"], source.get("revision"), "dataset")
    except Exception as error:  # the hub unreachable: the cache may still serve the data, load_dataset decides
        print(f"{source['path']}: revision not resolved ({type(error).__name__}: {str(error)[:200]})", flush=True)
        return source, f"{source.get('revision') or 'main'} (unresolved: {type(error).__name__})"
    return {**source, "revision": commit}, commit


def prepare(config: PrepareConfig, rows_of=load_source) -> tuple[dict[str, list[dict]], dict]:
    """Every configured data set, decontaminated; and the counts for the manifest."""
    tables, bad, revisions = {}, Counter(), {}
    for stem, sources in config.source_map().items():
        tables[stem], revisions[stem] = [], []
        for index, source in enumerate(sources):
            source, commit = at_resolved_revision(source)
            revisions[stem].append(commit)
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
              "decontaminated": removed, "bad_rows_dropped": dict(bad), "revisions": revisions}
    return tables, counts


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
