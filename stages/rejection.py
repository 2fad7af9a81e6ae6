"""Rejection sampling: verify and filter the sampled responses, then assemble the SFT mixture.

    python -m stages.rejection --shards results/tiny/rejection_sampling/shards/*.jsonl \
        --general_data results/tiny/data/general.parquet --targets math=600 general=200 \
        --output_dir results/tiny/mixture

Reasoning rows keep only responses whose final answer is correct (rule-based; a code row's program
must pass its tests in the sandbox), well formatted, in one language, without long paragraphs, code
blocks in the reasoning or repetition; at most `max_per_prompt` per prompt, deduplicated.
Non-reasoning rows come from the general instruction data with their references (the paper reused
DeepSeek-V3's SFT data). Each domain is filled to its
target count; a domain that falls short fails the stage, naming what to raise, unless
`allow_shortfall`. Every filter's removals are counted in the manifest.
"""

import json
import os
import random
import re
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

from stages.artifacts import MIXTURE, staged_output
from stages.cli import parse_config, print_config
from stages.data.schema import SCHEMAS, normalize_prompt, read_table
from stages.rewards.format import is_well_formatted
from stages.rewards.grading import Grader
from stages.rewards.language import reasoning_of, target_language_share
from stages.templates import chat_messages

NON_REASONING = "general"  # the target name of the non-reasoning share
SHARD_FIELDS = ("id", "sample", "prompt", "solution", "domain", "completion")


@dataclass
class RejectionConfig:
    shards: list[str] = field(metadata={"help": "Generation shard JSONL files."})
    general_data: str = field(metadata={"help": "Non-reasoning instructions (general parquet)."})
    output_dir: str = field(metadata={"help": "Where mixture.parquet and the manifest go."})
    targets: list[str] = field(metadata={"help": "DOMAIN=COUNT per domain; `general` is the non-reasoning share "
                                                 "(paper: ~600K reasoning + ~200K general)."})
    template: str = field(default="chat", metadata={"help": "Response format of the sampled responses."})
    max_per_prompt: int = field(default=1, metadata={"help": "Correct responses kept per prompt."})
    language: str = field(default="en", metadata={"help": "Target language of the reasoning."})
    min_language_share: float = field(default=1.0, metadata={"help": "Drop CoTs with a smaller share of target-language words."})
    max_paragraph_chars: int = field(default=2000, metadata={"help": "Drop CoTs with a longer paragraph."})
    max_repeated_ngram_share: float = field(default=0.5, metadata={"help": "Drop responses whose repeated 4-grams exceed this share."})
    allow_shortfall: bool = field(default=False, metadata={"help": "Accept fewer rows than a target instead of failing."})
    verify_timeout_s: float = field(default=5.0)
    code_timeout_s: float = field(default=5.0, metadata={"help": "Wall clock per test case of a code row."})
    allow_rlimit_only: bool = field(default=False, metadata={
        "help": "Run code rows' programs without namespace isolation where bubblewrap is missing (unsafe)."})
    num_workers: int = field(default=0, metadata={
        "help": "Processes that verify and filter candidates (0: every CPU this job may use)."})
    seed: int = field(default=0)

    def target_counts(self) -> dict[str, int]:
        counts = {}
        for item in self.targets:
            domain, _, count = item.partition("=")
            if not domain or not count.isdigit():
                raise ValueError(f"target {item!r} is not DOMAIN=COUNT")
            counts[domain] = int(count)
        return counts


def read_shards(paths: list[str]) -> list[dict]:
    rows = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as error:
                    raise ValueError(f"{path}:{number}: not JSON ({error.msg})") from None
                missing = [k for k in SHARD_FIELDS if k not in row]
                if missing:
                    raise ValueError(f"{path}:{number}: missing field(s) {missing}")
                rows.append(row)
    return rows


def repeated_ngram_share(text: str, n: int = 4) -> float:
    words = text.split()
    grams = [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]
    return 1 - len(set(grams)) / len(grams) if grams else 0.0


def longest_paragraph(text: str) -> int:
    return max((len(p) for p in re.split(r"\n\s*\n", text)), default=0)


class Filters:
    """Each check returns the reason a response is dropped, or None; counts go to the manifest."""

    def __init__(self, config: RejectionConfig):
        self.config = config
        self.grader = Grader(config.template, config.verify_timeout_s, code_timeout_s=config.code_timeout_s,
                             allow_rlimit_only=config.allow_rlimit_only)

    def reason_to_drop(self, row: dict) -> str | None:
        config, text = self.config, row["completion"]
        (correct,) = self.grader.grade_many([self.grader.answer(text, row)], [row])
        if not correct:
            return "incorrect"
        if not is_well_formatted(text, config.template):
            return "bad_format"
        reasoning = reasoning_of(text)
        if target_language_share(reasoning, config.language) < config.min_language_share:
            return "mixed_language"
        if longest_paragraph(reasoning) > config.max_paragraph_chars:
            return "long_paragraph"
        if "```" in reasoning:  # code answers live in the summary, which this does not look at
            return "code_in_reasoning"
        if repeated_ngram_share(text) > config.max_repeated_ngram_share:
            return "repetition"
        return None


CHUNK = 2000  # candidates per task of the worker pool

_filters: Filters | None = None  # one per pool worker, with its own math-verify processes and sandbox


def _start_filters(config: RejectionConfig) -> None:
    global _filters
    _filters = Filters(config)


def _reasons_to_drop(rows: list[dict]) -> list[str | None]:
    return [_filters.reason_to_drop(row) for row in rows]


def drop_reasons(rows: list[dict], config: RejectionConfig) -> list[str | None]:
    """Each candidate's reason to drop (None: keep), in order; chunks of candidates go to a pool of
    processes, since verifying and filtering millions of long responses is CPU-bound."""
    workers = config.num_workers or len(os.sched_getaffinity(0))
    chunks = [rows[i:i + CHUNK] for i in range(0, len(rows), CHUNK)]
    if workers == 1 or len(chunks) <= 1:
        filters = Filters(config)
        try:
            return [filters.reason_to_drop(row) for row in rows]
        finally:
            filters.grader.close()
    with ProcessPoolExecutor(min(workers, len(chunks)), initializer=_start_filters, initargs=(config,)) as pool:
        return [reason for chunk in pool.map(_reasons_to_drop, chunks) for reason in chunk]


def filter_reasoning(rows: list[dict], config: RejectionConfig) -> tuple[list[dict], Counter]:
    removed, kept, seen = Counter(), [], set()
    for row, reason in zip(rows, drop_reasons(rows, config)):
        key = (row["id"], " ".join(row["completion"].split()))
        if reason is None and key in seen:
            reason = "duplicate"
        if reason:
            removed[reason] += 1
            continue
        seen.add(key)
        kept.append(row)
    random.Random(config.seed).shuffle(kept)
    per_prompt, capped = Counter(), []
    for row in kept:
        per_prompt[row["id"]] += 1
        if per_prompt[row["id"]] > config.max_per_prompt:
            removed["over_max_per_prompt"] += 1
        else:
            capped.append(row)
    return capped, removed


def reasoning_example(row: dict) -> dict:
    return {"id": f"{row['id']}-s{row['sample']}", "domain": row["domain"],
            # the prompt exactly as generation rendered it, with its domain's instruction
            "messages": chat_messages(row["prompt"], row["domain"]) + [{"role": "assistant", "content": row["completion"]}]}


def general_examples(path: str) -> list[dict]:
    unique = {}
    for row in read_table(path, "general").to_pylist():
        unique.setdefault((normalize_prompt(row["prompt"]), row["reference"].strip()), row)
    return [{"id": row["id"], "domain": NON_REASONING,
             "messages": [{"role": "user", "content": row["prompt"]}, {"role": "assistant", "content": row["reference"]}]}
            for row in unique.values()]


def assemble(pools: dict[str, list[dict]], targets: dict[str, int], allow_shortfall: bool, seed: int,
             samples_per_prompt: int, max_per_prompt: int) -> list[dict]:
    shortfalls = {d: (len(pools.get(d, [])), n) for d, n in targets.items() if len(pools.get(d, [])) < n}
    if shortfalls and not allow_shortfall:
        lines = [f"domain '{d}' fell short: {have} of {want} examples ({want - have} missing)"
                 for d, (have, want) in shortfalls.items()]
        raise ValueError("; ".join(lines) + f". Raise the number of prompts, the samples per prompt (now "
                         f"{samples_per_prompt}) or max_per_prompt (now {max_per_prompt}) for reasoning domains, "
                         "the general data for 'general', or set allow_shortfall")
    rng = random.Random(seed)
    mixture = []
    for domain, count in targets.items():
        pool = list(pools.get(domain, []))
        rng.shuffle(pool)
        mixture += pool[:count]
    rng.shuffle(mixture)
    return mixture


def main(argv=None):
    config = parse_config(RejectionConfig, argv)
    print_config(config)
    targets = config.target_counts()
    candidates = read_shards(config.shards)
    samples_per_prompt = max(Counter(row["id"] for row in candidates).values(), default=0)
    known = {row["domain"] for row in candidates} | {NON_REASONING}
    unknown = [domain for domain in targets if domain not in known]
    if unknown:
        raise ValueError(f"targets name domain(s) {unknown} that no sampled prompt has (domains: {sorted(known)})")
    kept, removed = filter_reasoning(candidates, config)
    pools: dict[str, list[dict]] = {}
    for row in kept:
        pools.setdefault(row["domain"], []).append(reasoning_example(row))
    pools[NON_REASONING] = general_examples(config.general_data)
    mixture = assemble(pools, targets, config.allow_shortfall, config.seed, samples_per_prompt, config.max_per_prompt)

    inputs = {"general_data": config.general_data, **{f"shard_{i}": p for i, p in enumerate(config.shards)}}
    with staged_output(config.output_dir, "rejection_sampling", config, inputs) as (scratch, headline):
        pq.write_table(pa.Table.from_pylist(mixture, schema=SCHEMAS["sft"]), scratch / MIXTURE)
        selected = Counter(row["domain"] for row in mixture)
        headline.update({
            "candidates": len(candidates),
            "removed": dict(removed),
            "kept_reasoning": len(kept),
            "available": {domain: len(pool) for domain, pool in pools.items()},
            "selected": dict(selected),
            "total": len(mixture),
        })
    print(f"mixture: {json.dumps(headline)}")


if __name__ == "__main__":
    main()
