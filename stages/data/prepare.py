"""Prepares data sets from their sources: downloads each configured Hugging Face data set once (on the
login node, rule `prepare_data`, one job per set) or reads a local file, maps its rows onto the pipeline's
schemas, drops or rejects bad rows, removes training prompts that overlap an evaluation set, and writes one
parquet file per data set, with `<set>.rejects.jsonl` beside it naming every row left out (file, line or
row, reason). Compute jobs read only these files.

    python -m stages.data.prepare --output_dir results/qwen2.5-1.5b/prepare_data/rl_prompts \
        --sources '{"rl_prompts": [...]}' --eval_data results/qwen2.5-1.5b/prepare_data/eval_aime24/eval_aime24.parquet

`--sources` maps a data-set file stem (`rl_prompts`, `cold_start`, `eval_aime24`, ...; see
stages/lib/data/schema.py for the kinds) to a list of sources, each a JSON object:

    path          hub id; or a local file, read by its extension (.jsonl, .json, .csv, .parquet) as the
                  source's `split` whatever the file's name; or a local directory, read as `datasets` reads a
                  hub repository (its README's configs; file names containing train/test/eval/... are splits)
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

from stages.lib.artifacts import staged_output, write_jsonl
from stages.lib.cli import parse_config, print_config
from stages.lib.data.schema import kind_of, normalize_prompt, read_table, write_tables
from stages.lib.data.sources import BadRow, SourceError, convert, load_source, local_path, row_lines
from stages.lib.hub import LOCAL, resolved_revision

FORMATS = ("columns", "gpqa", "hh_rlhf")
REJECTS_SUFFIX = ".rejects.jsonl"  # beside each set's parquet file: every row left out, where it is and why
DECONTAMINATED = "shares an n-gram with an evaluation prompt (decontamination)"
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
    eval_data: list[str] = field(default_factory=list, metadata={
        "help": "Evaluation sets prepared before (eval_<name>.parquet files) whose prompts the training sets here "
                "must not share, besides the eval_* sets in --sources."})

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

def mapped_columns(source: dict) -> dict[str, str]:
    """Schema field -> the source column its `fields` mapping starts at (`messages.-1.content` -> `messages`)."""
    return {name: column.split(".")[0] for name, column in source.get("fields", {}).items()}


def check_columns(stem: str, source: dict, columns: list[str] | None) -> None:
    """Every column the mapping names is there: otherwise every row would be bad, for a reason the rows hide."""
    if columns is None:  # a stream of unknown features
        return
    missing = {name: column for name, column in mapped_columns(source).items() if column not in columns}
    if missing:
        named = ", ".join(f"fields.{name}: '{column}'" for name, column in missing.items())
        raise ValueError(f"{stem}: {source['path']} has no column {named}; its columns: {', '.join(columns)}. "
                         "Map each field to one of them") from None


def reject(stem: str, source: dict, index: int, lines: list[int] | None, reason: str, detail: str = "") -> dict:
    """A rejects-file row: where the row is (a line of a local .jsonl/.csv file, else its row number, 0-based as
    `exclude_rows` counts) and why it was left out."""
    where = {"line": lines[index]} if lines and index < len(lines) else {"row": index}
    return {"set": stem, "file": source["path"], **where, "reason": reason, **({"detail": detail} if detail else {})}


def read_rows(stem: str, source_index: int, source: dict, seed: int, on_bad_row: str,
              bad: Counter, rejects: list[dict], rows_of=load_source) -> list[tuple[dict, dict]]:
    """The source's usable rows, each with where it came from (for the rejects file); a bad row is counted in
    `bad` and named in `rejects`, or stops the preparation (an evaluation set's always does)."""
    kind = kind_of(stem)
    skip, limit = source.get("skip_rows", 0), source.get("max_rows", 0)
    excluded = set(source.get("exclude_rows", []))
    dataset = rows_of(source)
    check_columns(stem, source, getattr(dataset, "column_names", None))
    local = local_path(source["path"])
    lines = row_lines(local) if local is not None else None
    rows, valid = [], 0
    for index, row in enumerate(dataset):
        if index in excluded:
            continue
        try:
            converted = convert(row, kind, source, seed)
        except BadRow as problem:
            at = f"line {lines[index]}" if lines else f"row {index}"
            where = f"{stem}: {at} of {source['path']} ({source.get('split', 'train')}): {problem}"
            if stem.startswith("eval_"):  # scores must be over the published set, or say which rows they leave
                raise ValueError(f"{where}. An evaluation set never drops a row: fix the source, or leave the row "
                                 f"out on purpose with `exclude_rows: [{index}]` in this source") from None
            if on_bad_row == "error":
                raise ValueError(f"{where} (set on_bad_row: drop to skip such rows)") from None
            bad[f"{stem}: {problem.reason}"] += 1
            rejects.append(reject(stem, source, index, lines, problem.reason, str(problem)))
            continue
        valid += 1
        if valid <= skip:
            continue
        if kind != "corpus":
            converted["id"] = f"{stem}-{source_index}-{index}"
        rows.append((converted, reject(stem, source, index, lines, DECONTAMINATED)))
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
    if local_path(source["path"]) is not None:
        return source, LOCAL
    try:
        commit = resolved_revision(source["path"], source.get("revision"), "dataset")
    except Exception as error:  # the hub unreachable: the cache may still serve the data, load_dataset decides
        print(f"{source['path']}: revision not resolved ({type(error).__name__}: {str(error)[:200]})", flush=True)
        return source, f"{source.get('revision') or 'main'} (unresolved: {type(error).__name__})"
    return {**source, "revision": commit}, commit


def prepare(config: PrepareConfig, rows_of=load_source) -> tuple[dict[str, list[dict]], dict, dict[str, list[dict]]]:
    """Every configured data set, decontaminated; the counts for the manifest; and each set's rejected rows."""
    tables, bad, revisions, rejects, read = {}, Counter(), {}, {}, {}
    for stem, sources in config.source_map().items():
        tables[stem], revisions[stem], rejects[stem] = [], [], []
        for index, source in enumerate(sources):
            try:
                source, commit = at_resolved_revision(source)
                revisions[stem].append(commit)
                tables[stem] += read_rows(stem, index, source, config.seed, config.on_bad_row, bad, rejects[stem],
                                          rows_of)
            except SourceError as error:
                raise SourceError(f"{stem}: {error}") from None
        if not tables[stem]:
            raise ValueError(f"{stem}: no usable rows in {[s['path'] for s in sources]}"
                             + (f" ({len(rejects[stem])} bad: {rejects[stem][0]['reason']}, ...; see the rejects)"
                                if rejects[stem] else ""))
        read[stem] = len(tables[stem])
    eval_prompts = [p for stem, rows in tables.items() if stem.startswith("eval_")
                    for row, _ in rows for p in prompt_texts(row, kind_of(stem))]
    for path in config.eval_data:  # evaluation sets prepared apart (the workflow prepares each set in its own job)
        kind = kind_of(Path(path).stem)
        eval_prompts += [p for row in read_table(path, kind).to_pylist() for p in prompt_texts(row, kind)]
    decontaminator = Decontaminator(eval_prompts, config.decontamination_ngram, config.decontamination_boilerplate)
    removed = {}
    for stem, rows in tables.items():
        if stem.startswith("eval_"):
            tables[stem] = [row for row, _ in rows]
            continue
        kept = []
        for row, origin in rows:
            if any(decontaminator.overlaps(t) for t in prompt_texts(row, kind_of(stem))):
                rejects[stem].append(origin)
            else:
                kept.append(row)
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
    return tables, counts, rejects


def summary(stem: str, counts: dict) -> str:
    """One console line per set: what was kept, what was dropped and why, what decontamination removed."""
    prefix = f"{stem}: "
    dropped = {key.removeprefix(prefix): n for key, n in counts["bad_rows_dropped"].items() if key.startswith(prefix)}
    reasons = ", ".join(f"{n} {reason}" for reason, n in sorted(dropped.items(), key=lambda item: -item[1]))
    line = f"{stem}: kept {counts['rows'][stem]} rows; dropped {sum(dropped.values())} bad"
    line += f" ({reasons})" if reasons else ""
    if stem in counts["decontaminated"]:
        line += f"; decontaminated {counts['decontaminated'][stem]}"
    return line


def rejects_file(stem: str) -> str:
    return f"{stem}{REJECTS_SUFFIX}"


def main(argv=None):
    config = parse_config(PrepareConfig, argv)
    print_config(config)
    sources = config.source_map()
    inputs = {f"{stem}[{index}]": source["path"] for stem, items in sources.items()
              for index, source in enumerate(items) if local_path(source["path"]) is not None}
    inputs.update({Path(path).stem: path for path in config.eval_data})
    with staged_output(config.output_dir, "prepare_data", config, inputs=inputs) as (scratch, headline):
        tables, counts, rejects = prepare(config)
        write_tables(tables, Path(scratch))
        for stem, rows in rejects.items():
            write_jsonl(Path(scratch) / rejects_file(stem), rows)
        headline.update(counts, rejects={stem: rejects_file(stem) for stem in rejects})
    for stem in tables:
        print(summary(stem, counts) + (f"; rejects: {Path(config.output_dir) / rejects_file(stem)}"
                                       if rejects[stem] else ""), flush=True)


if __name__ == "__main__":
    main()
