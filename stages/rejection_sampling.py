"""Rejection sampling: verify and filter the sampled responses, then assemble the SFT mixture.

    python -m stages.rejection_sampling --shards results/tiny/generate/*.jsonl \
        --general_data results/tiny/data/general.parquet --targets math=600 general=200 \
        --output_dir results/tiny/rejection_sampling --work_dir results/tiny/.work/rejection_sampling

The same stage builds the cold start from R1-Zero's own samples (paper, Supplementary B.3.2): responses
sampled in another format than the chat format are rewritten into it (`readable`), and there are no
non-reasoning rows without `general_data`.

Reasoning rows keep only responses whose final answer is correct (rule-based; a code row's program
must pass its tests in the sandbox; a domain named in `judge_domains` is judged by a model instead),
well formatted, in one language, without long paragraphs, code blocks in the reasoning or
repetition; at most `max_per_prompt` per prompt, deduplicated. Non-reasoning rows come from the
general instruction data with their references (the paper reused DeepSeek-V3's SFT data). Each
domain is filled to its target count; a domain that falls short fails the stage, naming what to
raise, unless `allow_shortfall`. Every filter's removals are counted in the manifest.

Before the other shards are sampled, the first few can be projected (`--projection_file`): each domain's
kept count scaled to every shard, with an upper bound; a target out of reach even there fails then, not
after every shard has spent its GPU (rejection_sampling.projection_shards in the config).

At the paper's scale the pool is millions of long responses, more than a node's memory: the shards
stream through a pool of worker processes in line-aligned chunks, and the stage keeps only what
selection needs (per-prompt counts, 64-bit digests for deduplication, each kept candidate's place in
its shard); the selected rows are read back from the shards when the mixture is written. Every
verified chunk's verdicts are appended to `work_dir`, so a killed stage (or a rerun with other
targets) verifies only what it had not.
"""

import hashlib
import json
import math
import os
import random
import re
import time
from array import array
from collections import Counter, deque
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from stages.lib.artifacts import MIXTURE, staged_output, write_whole
from stages.lib.cli import parse_config, print_config
from stages.lib.data.schema import SCHEMAS, normalize_prompt, read_table
from stages.lib.generation import BackendOptions, load_generator
from stages.lib.judge import Judge, parse_verdict
from stages.lib.progress import ProgressLog
from stages.lib.rewards.answers import extract_final_answer
from stages.lib.rewards.code import is_code_row
from stages.lib.rewards.grading import Grader, graded_answer
from stages.lib.rewards.language import target_language_share
from stages.lib.rewards.sandbox import Sandbox, SandboxLimits
from stages.lib.rewards.steps import wrong_steps
from stages.lib.templates import CHAT, ResponseFormat, chat_messages, reasoning_of, response_format, summary_of

NON_REASONING = "general"  # the target name of the non-reasoning share
SHARD_FIELDS = ("id", "sample", "prompt", "solution", "domain", "completion")


@dataclass
class RejectionConfig:
    shards: list[str] = field(metadata={"help": "Generation shard JSONL files."})
    targets: list[str] = field(metadata={"help": "DOMAIN=COUNT per domain; `general` is the non-reasoning share "
                                                 "(paper: ~600K reasoning + ~200K general)."})
    output_dir: str = field(default="", metadata={"help": "Where mixture.parquet and the manifest go."})
    projection_file: str = field(default="", metadata={
        "help": "Instead of the mixture: project each target from the shards given (the first of "
                "--projected_num_shards), write the projection here, and fail when a target is out of reach "
                "(unless allow_shortfall), before the other shards are sampled."})
    projected_num_shards: int = field(default=0, metadata={"help": "The run's number of shards (with "
                                                                   "--projection_file)."})
    stage: str = field(default="rejection_sampling", metadata={"help": "Name recorded in the manifest "
                                                                       "(rejection_sampling, cold_start_data)."})
    general_data: str = field(default="", metadata={"help": "Non-reasoning instructions (general parquet); "
                                                            "none for a cold start."})
    template: str = field(default="chat", metadata={"help": "Response format of the sampled responses; another "
                                                            "than chat is rewritten into chat (R1-Zero's)."})
    max_per_prompt: int = field(default=1, metadata={"help": "Correct responses kept per prompt."})
    check_steps: bool = field(default=False, metadata={"help": "Drop math responses with a wrong computation in "
                                                               "their reasoning (2 + 3 = 6): a right answer "
                                                               "through a wrong step teaches the wrong fact."})
    language: str = field(default="en", metadata={"help": "Target language of the reasoning."})
    min_language_share: float = field(default=1.0, metadata={"help": "Drop CoTs with a smaller "
                                                                     "share of target-language words."})
    max_paragraph_chars: int = field(default=2000, metadata={"help": "Drop CoTs with a longer paragraph."})
    max_repeated_ngram_share: float = field(default=0.5, metadata={"help": "Drop responses whose repeated "
                                                                           "4-grams exceed this share."})
    allow_shortfall: bool = field(default=False, metadata={"help": "Accept fewer rows than a "
                                                                   "target instead of failing."})
    verify_timeout_s: float = field(default=5.0)
    code_timeout_s: float = field(default=5.0, metadata={"help": "Wall clock per test case of a code row."})
    allow_rlimit_only: bool = field(default=False, metadata={
        "help": "Run code rows' programs without namespace isolation where bubblewrap is missing (unsafe)."})
    num_workers: int = field(default=0, metadata={
        "help": "Processes that verify and filter candidates (0: every CPU this job may use)."})
    work_dir: str = field(default="", metadata={
        "help": "Where verified chunks' verdicts (and the judge's) are kept for a rerun. Default: <output_dir>.work"})
    judge_model: str = field(default="", metadata={"help": "A model directory that judges `judge_domains` (off: '')."})
    judge_domains: list[str] = field(default_factory=list, metadata={
        "help": "Domains whose answers no rule can check: the judge model decides their correctness."})
    judge_backend: str = field(default="transformers", metadata={"help": "transformers (CPU or GPU) or vllm (GPU)."})
    judge_batch_size: int = field(default=64, metadata={
        "help": "Candidates per judge call; the judge's verdicts are saved after each."})
    judge_max_new_tokens: int = field(default=8, metadata={"help": "Room for the one-word verdict."})
    judge_vllm_tensor_parallel_size: int = field(default=1)
    judge_vllm_gpu_memory_utilization: float = field(default=0.9)
    judge_vllm_max_model_len: int = field(default=0, metadata={"help": "0: the judge model's context."})
    seed: int = field(default=0)

    def __post_init__(self):
        if bool(self.output_dir) == bool(self.projection_file):
            raise ValueError("give either --output_dir (the mixture) or --projection_file (the first shards' "
                             "projection)")
        if self.projection_file and self.projected_num_shards < len(self.shards):
            raise ValueError(f"--projected_num_shards {self.projected_num_shards} is fewer than the "
                             f"{len(self.shards)} shards given")
        self.work_dir = self.work_dir or f"{self.output_dir or self.projection_file}.work"
        # a projection judges nothing: it counts a judged domain's candidates as kept, an upper bound
        if (self.judge_model and not self.judge_domains) or (self.judge_domains and not self.judge_model
                                                             and not self.projection_file):
            raise ValueError("a judge needs both judge_model and judge_domains (rejection_sampling.judge: "
                             "name_or_path and domains)")
        if NON_REASONING in self.judge_domains:
            raise ValueError(f"judge_domains names '{NON_REASONING}', the non-reasoning share, which is not sampled")

    def verdict_fingerprint(self) -> dict:
        """The settings a candidate's verdict depends on; targets, seed and the judge's model do not."""
        unrelated = {"shards", "general_data", "output_dir", "targets", "max_per_prompt", "allow_shortfall",
                     "num_workers", "work_dir", "seed", "projection_file", "projected_num_shards"}
        return {k: v for k, v in asdict(self).items() if k not in unrelated and not k.startswith("judge_")} | {
            "judge_domains": sorted(self.judge_domains)}

    def judge_options(self) -> BackendOptions:
        return BackendOptions(backend=self.judge_backend, batch_size=self.judge_batch_size,
                              vllm_tensor_parallel_size=self.judge_vllm_tensor_parallel_size,
                              vllm_gpu_memory_utilization=self.judge_vllm_gpu_memory_utilization,
                              vllm_max_model_len=self.judge_vllm_max_model_len)

    def target_counts(self) -> dict[str, int]:
        counts = {}
        for item in self.targets:
            domain, _, count = item.partition("=")
            if not domain or not count.isdigit():
                raise ValueError(f"target {item!r} is not DOMAIN=COUNT")
            counts[domain] = int(count)
        return counts


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
        if row["domain"] not in config.judge_domains:  # a judged domain's correctness is decided later
            (correct,) = self.grader.grade_many([self.grader.answer(text, row)], [row])
            if not correct:
                return "incorrect"
        if not self.grader.format.is_well_formatted(text):
            return "bad_format"
        reasoning = reasoning_of(text)
        if config.check_steps and row["domain"] == "math" and wrong_steps(reasoning):
            return "wrong_step"
        if target_language_share(reasoning, config.language) < config.min_language_share:
            return "mixed_language"
        if longest_paragraph(reasoning) > config.max_paragraph_chars:
            return "long_paragraph"
        if "```" in reasoning:  # code answers live in the summary, which this does not look at
            return "code_in_reasoning"
        if repeated_ngram_share(text) > config.max_repeated_ngram_share:
            return "repetition"
        return None


CHUNK_BYTES = 4 << 20  # shard text per task of the worker pool (about a thousand 4K-character candidates)
IN_FLIGHT_PER_WORKER = 2  # chunks queued per worker: enough to keep it busy, few enough to bound memory

_filters: Filters | None = None  # one per pool worker, with its own math-verify processes and sandbox


@dataclass(frozen=True)
class Chunk:
    """A line-aligned byte range of one shard: the unit of verification and of the verdict log."""

    shard: int  # index into the stage's shard list
    path: str
    start: int
    end: int
    stamp: tuple[int, int]  # shard_stamp: a regenerated shard does not match its old verdicts

    def identity(self) -> list:
        return [self.path, *self.stamp, self.start, self.end]


def shard_stamp(path: str) -> tuple[int, int]:
    """A shard's size and mtime: verdicts recorded for it are reused only while both stay the same."""
    status = os.stat(path)
    return status.st_size, status.st_mtime_ns


def shard_chunks(paths: list[str], chunk_bytes: int) -> Iterator[Chunk]:
    for shard, path in enumerate(paths):
        stamp = shard_stamp(path)
        size = stamp[0]
        with open(path, "rb") as f:
            start = 0
            while start < size:
                f.seek(min(start + chunk_bytes, size) - 1)
                f.readline()  # to the end of the line the range would cut
                end = f.tell()
                yield Chunk(shard, path, start, end, stamp)
                start = end


def line_number(path: str, offset: int) -> int:
    with open(path, "rb") as f:
        return f.read(offset).count(b"\n") + 1


def parse_line(line: bytes, path: str, offset: int) -> dict:
    try:
        row = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}:{line_number(path, offset)}: not JSON ({getattr(error, 'msg', error)})") from None
    missing = [k for k in SHARD_FIELDS if k not in row] if isinstance(row, dict) else list(SHARD_FIELDS)
    if missing:
        raise ValueError(f"{path}:{line_number(path, offset)}: missing field(s) {missing}")
    return row


def read_row(f, offset: int, length: int) -> dict:
    f.seek(offset)
    return json.loads(f.read(length))


def duplicate_key(row: dict) -> int:
    """A 64-bit digest of (prompt, whitespace-normalized response): the stage keeps digests, not text."""
    text = f"{row['id']}\0{' '.join(row['completion'].split())}"
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def verify_chunk(chunk: Chunk, filters: Filters | None = None) -> list[list]:
    """[offset, length, reason to drop (None: keep), prompt id, domain, duplicate key] per candidate."""
    filters = filters or _filters
    with open(chunk.path, "rb") as f:
        f.seek(chunk.start)
        data = f.read(chunk.end - chunk.start)
    verdicts, position = [], 0
    while position < len(data):
        end = data.find(b"\n", position)
        end = len(data) if end == -1 else end + 1
        offset = chunk.start + position
        row = parse_line(data[position:end], chunk.path, offset)
        verdicts.append([offset, end - position, filters.reason_to_drop(row), row["id"], row["domain"],
                         duplicate_key(row)])
        position = end
    return verdicts


def _start_filters(config: "RejectionConfig") -> None:
    global _filters
    _filters = Filters(config)


class VerdictLog:
    """Verified chunks, in order, in a progress log outside the outputs (stages/lib/progress.py). A rerun
    (after a kill, or with other targets) reuses the longest prefix that matches today's shards and filter
    settings, and verifies the rest: at paper scale verification is CPU-hours."""

    def __init__(self, path: Path, fingerprint: dict):
        self.log = ProgressLog(path, fingerprint)
        self.replayed = self.log.replay()
        self.reused, self.recalling = 0, True

    def recall(self, chunk: Chunk) -> list[list] | None:
        if not self.recalling:
            return None
        record = next(self.replayed, None)
        if record is not None and record["chunk"] == chunk.identity():
            self.reused += 1
            return record["verdicts"]
        self._stop_recalling()
        return None

    def _stop_recalling(self) -> None:
        if self.recalling:
            self.recalling = False
            self.replayed.close()
            self.log.keep(self.reused)

    def record(self, chunk: Chunk, verdicts: list[list]) -> None:
        self._stop_recalling()
        self.log.append([{"chunk": chunk.identity(), "verdicts": verdicts}])  # a kill loses the chunks in flight

    def close(self) -> None:
        self._stop_recalling()
        self.log.close()


class Candidates:
    """What selection needs from the verified pool, without the text: per-prompt counts, removal
    counts, digests for deduplication, and each kept candidate's place in its shard."""

    def __init__(self):
        self.prompt_index: dict[str, int] = {}  # prompt id -> the number the `prompt` column holds
        self.candidates_per_prompt: Counter = Counter()  # by that number
        self.domains: list[str] = []
        self.removed: Counter = Counter()
        self.seen: set[int] = set()
        self.total = 0
        # kept candidates, in shard order
        self.shard, self.offset, self.length = array("I"), array("q"), array("I")
        self.prompt, self.domain = array("I"), array("H")

    def add(self, chunk: Chunk, verdicts: list[list]) -> None:
        for offset, length, reason, prompt_id, domain, key in verdicts:
            self.total += 1
            prompt = self.prompt_index.setdefault(prompt_id, len(self.prompt_index))
            self.candidates_per_prompt[prompt] += 1
            if domain not in self.domains:
                self.domains.append(domain)
            if reason is None and key in self.seen:
                reason = "duplicate"
            if reason:
                self.removed[reason] += 1
                continue
            self.seen.add(key)
            for column, value in ((self.shard, chunk.shard), (self.offset, offset), (self.length, length),
                                  (self.prompt, prompt), (self.domain, self.domains.index(domain))):
                column.append(value)

    def __len__(self) -> int:
        return len(self.offset)

    def drop(self, indices: set[int]) -> None:
        keep = [i for i in range(len(self)) if i not in indices]
        for name in ("shard", "offset", "length", "prompt", "domain"):
            column = getattr(self, name)
            setattr(self, name, array(column.typecode, (column[i] for i in keep)))

    def read(self, paths: list[str], indices: list[int]) -> dict[int, dict]:
        """The rows of some kept candidates, each shard opened once, read in file order."""
        rows, by_shard = {}, {}
        for i in indices:
            by_shard.setdefault(self.shard[i], []).append(i)
        for shard, members in by_shard.items():
            with open(paths[shard], "rb") as f:
                for i in sorted(members, key=self.offset.__getitem__):
                    rows[i] = read_row(f, self.offset[i], self.length[i])
        return rows


def done(result) -> Future:
    future = Future()
    future.set_result(result)
    return future


def verify_pool(config: "RejectionConfig", log: VerdictLog) -> Candidates:
    """Streams the shards through the worker pool, chunk by chunk, in order: memory holds the chunks in
    flight and the kept candidates' places, never the pool."""
    workers = config.num_workers or len(os.sched_getaffinity(0))
    total_bytes = sum(os.path.getsize(p) for p in config.shards)
    candidates, done_bytes, started, last_report = Candidates(), 0, time.time(), 0.0
    pool = ProcessPoolExecutor(workers, initializer=_start_filters, initargs=(config,)) if workers > 1 else None
    local = Filters(config) if pool is None else None
    in_flight: deque = deque()

    def finish_oldest() -> None:
        nonlocal done_bytes, last_report
        chunk, future, verified = in_flight.popleft()
        verdicts = future.result()
        if verified:
            log.record(chunk, verdicts)
        candidates.add(chunk, verdicts)
        done_bytes += chunk.end - chunk.start
        elapsed = time.time() - started
        if elapsed - last_report >= 30 or done_bytes == total_bytes:
            last_report = elapsed
            eta = elapsed / done_bytes * (total_bytes - done_bytes)
            print(f"verified {done_bytes / 2**20:,.1f}/{total_bytes / 2**20:,.1f} MiB of shards, "
                  f"{candidates.total:,} candidates, {len(candidates):,} kept; {elapsed:,.0f} s elapsed, "
                  f"ETA {eta:,.0f} s", flush=True)

    try:
        for chunk in shard_chunks(config.shards, CHUNK_BYTES):
            recalled = log.recall(chunk)
            if recalled is not None:
                in_flight.append((chunk, done(recalled), False))
            elif pool is None:
                in_flight.append((chunk, done(verify_chunk(chunk, local)), True))
            else:
                in_flight.append((chunk, pool.submit(verify_chunk, chunk), True))
            while len(in_flight) > IN_FLIGHT_PER_WORKER * workers:
                finish_oldest()
        while in_flight:
            finish_oldest()
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
        if local is not None:
            local.grader.close()
    if log.reused:
        print(f"reused the verdicts of {log.reused} chunk(s) from {log.log.path}", flush=True)
    return candidates


def readable(row: dict, fmt: ResponseFormat) -> str:
    """A correct response sampled in another format (R1-Zero's `<think> .. </think> <answer> .. </answer>`)
    in the chat format: its reasoning one sentence per line, then the chat format's summary of its answer.
    The paper had a stronger model and people rewrite R1-Zero's samples readable; a rule does it here."""
    sentences = re.split(r"\n+|(?<=\.)\s+", reasoning_of(row["completion"]))
    steps = [sentence.strip().rstrip(".").strip() for sentence in sentences if sentence.strip(" .")]
    answer = graded_answer(row["completion"], row, fmt)
    if is_code_row(row):
        return CHAT.code_completion(steps, answer.rstrip("\n"))
    return CHAT.math_completion(steps, answer)


def reasoning_example(row: dict, fmt: ResponseFormat = CHAT) -> dict:
    completion = row["completion"] if fmt is CHAT else readable(row, fmt)
    return {"id": f"{row['id']}-s{row['sample']}", "domain": row["domain"],
            # the prompt exactly as generation rendered it, with its domain's instruction
            "messages": chat_messages(row["prompt"], row["domain"]) + [{"role": "assistant", "content": completion}]}


def general_examples(path: str) -> list[dict]:
    unique = {}
    for row in read_table(path, "general").to_pylist():
        unique.setdefault((normalize_prompt(row["prompt"]), row["reference"].strip()), row)
    return [{"id": row["id"], "domain": NON_REASONING,
             "messages": [{"role": "user", "content": row["prompt"]},
                          {"role": "assistant", "content": row["reference"]}]}
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


def projected_counts(kept: int, shards_read: int, num_shards: int) -> tuple[float, float]:
    """A domain's kept count over every shard, from its count in the first `shards_read` (shards split the
    prompts round-robin, so each is a sample of the pool): the expectation, and a ~97.5% upper bound that
    treats the count as Poisson ((sqrt(k + 1) + 1)^2 bounds k's mean; 4 for a domain that kept nothing)."""
    scale = num_shards / shards_read
    return kept * scale, (math.sqrt(kept + 1) + 1) ** 2 * scale


def project(config: RejectionConfig, candidates: "Candidates", targets: dict[str, int]) -> None:
    """Writes what the first shards project for each target, and fails when a target is out of reach even at
    the projection's upper bound, naming what to change, so that the other shards never spend their GPUs on a
    mixture that would fail after all of them. The general share is counted, not projected."""
    capped = Counter(candidates.domains[candidates.domain[i]] for i in cap_per_prompt(candidates, config))
    general = len(general_examples(config.general_data)) if config.general_data else 0
    shards_read, num_shards = len(config.shards), config.projected_num_shards
    rows = {}
    for domain, want in targets.items():
        kept = general if domain == NON_REASONING else capped[domain]
        expected, upper = (kept, kept) if domain == NON_REASONING else projected_counts(kept, shards_read, num_shards)
        rows[domain] = {"kept": kept, "expected": round(expected), "upper_bound": round(upper), "target": want,
                        "out_of_reach": upper < want}
    print(f"projection from {shards_read} of {num_shards} shards "
          f"({candidates.total:,} candidates; judged domains, if any, not judged: their counts are upper bounds):")
    for domain, row in rows.items():
        print(f"  {domain}: {row['kept']:,} kept -> ~{row['expected']:,} expected (at most ~{row['upper_bound']:,})"
              f" for a target of {row['target']:,}{'  OUT OF REACH' if row['out_of_reach'] else ''}", flush=True)
    short = {domain: row for domain, row in rows.items() if row["out_of_reach"]}
    if short and not config.allow_shortfall:
        lines = [f"'{d}' ~{row['expected']:,} (at most ~{row['upper_bound']:,}) of {row['target']:,}"
                 for d, row in short.items()]
        raise SystemExit(
            f"rejection sampling would fall short, projected from the first {shards_read} of {num_shards} shards: "
            + "; ".join(lines) + ". Before the other shards run: lower rejection_sampling.targets, raise "
            "rejection_sampling.generation.num_samples or filters.max_per_prompt, or set filters.allow_shortfall")
    write_whole(config.projection_file,
                json.dumps({"shards_read": shards_read, "num_shards": num_shards, "domains": rows}, indent=1))


def judge_candidates(config: RejectionConfig, candidates: Candidates) -> dict:
    """Lets the judge model decide the kept candidates of `judge_domains`, in batches whose verdicts
    are appended to a log, so a rerun judges only what it had not. A candidate judged incorrect, or
    whose reply is no verdict, is dropped and counted."""
    judged = {candidates.domains.index(d) for d in config.judge_domains if d in candidates.domains}
    pending = [i for i in range(len(candidates)) if candidates.domain[i] in judged]
    stamps = [(path, *shard_stamp(path)) for path in config.shards]
    place = lambda i: (*stamps[candidates.shard[i]], candidates.offset[i])  # noqa: E731
    log = ProgressLog(Path(config.work_dir) / "judged.jsonl", {"judge": {
        "model": os.path.abspath(config.judge_model), "backend": config.judge_backend,
        "max_new_tokens": config.judge_max_new_tokens, "template": config.template, "seed": config.seed}})
    verdicts = {tuple(record["place"]): record["verdict"] for record in log.replay()}  # a torn line is judged again
    todo = [i for i in pending if place(i) not in verdicts]
    print(f"judge: {len(pending):,} candidates of {sorted(config.judge_domains)}, {len(pending) - len(todo):,} "
          f"judged before", flush=True)
    if todo:
        generator = load_generator(config.judge_model, config.judge_backend, **config.judge_options().backend_kwargs())
        judge = Judge(generator, config.judge_max_new_tokens, config.seed)
        fmt = response_format(config.template)
        started = time.time()
        for start in range(0, len(todo), config.judge_batch_size):
            batch = todo[start:start + config.judge_batch_size]
            rows = candidates.read(config.shards, batch)
            replies = judge.replies(
                [rows[i]["prompt"] for i in batch], [str(rows[i]["solution"]) for i in batch],
                [extract_final_answer(rows[i]["completion"], fmt) or summary_of(rows[i]["completion"])
                 for i in batch])
            records = [{"place": place(i), "verdict": parse_verdict(reply), "reply": reply[:200]}
                       for i, reply in zip(batch, replies)]
            verdicts.update({record["place"]: record["verdict"] for record in records})
            log.append(records)
            done_count, elapsed = start + len(batch), time.time() - started
            print(f"judged {done_count:,}/{len(todo):,}; {elapsed:,.0f} s elapsed, "
                  f"ETA {elapsed / done_count * (len(todo) - done_count):,.0f} s", flush=True)
    log.close()
    verdict_of = {i: verdicts[place(i)] for i in pending}
    outcome = Counter({True: "correct", False: "incorrect", None: "not_judged"}[v] for v in verdict_of.values())
    candidates.drop({i for i, verdict in verdict_of.items() if verdict is not True})
    candidates.removed.update({reason: outcome[reason] for reason in ("incorrect", "not_judged") if outcome[reason]})
    return {"candidates": len(pending), **{k: outcome[k] for k in ("correct", "incorrect", "not_judged")}}


def cap_per_prompt(candidates: Candidates, config: RejectionConfig) -> list[int]:
    """At most max_per_prompt kept candidates per prompt, chosen at random (seeded)."""
    order = list(range(len(candidates)))
    random.Random(config.seed).shuffle(order)
    per_prompt, capped = Counter(), []
    for i in order:
        per_prompt[candidates.prompt[i]] += 1
        if per_prompt[candidates.prompt[i]] > config.max_per_prompt:
            candidates.removed["over_max_per_prompt"] += 1
        else:
            capped.append(i)
    return capped


WRITE_BATCH = 4096  # mixture rows read back from the shards and written per parquet row group


def write_mixture(path: Path, mixture: list, candidates: Candidates, shards: list[str], fmt: ResponseFormat) -> None:
    """The mixture in its order, in the chat format; a reasoning row (an int: a kept candidate) is read back
    from its shard."""
    with pq.ParquetWriter(path, SCHEMAS["sft"]) as writer:
        for start in range(0, len(mixture), WRITE_BATCH):
            batch = mixture[start:start + WRITE_BATCH]
            rows = candidates.read(shards, [item for item in batch if isinstance(item, int)])
            examples = [reasoning_example(rows[item], fmt) if isinstance(item, int) else item for item in batch]
            writer.write_table(pa.Table.from_pylist(examples, schema=SCHEMAS["sft"]))


def main(argv=None):
    config = parse_config(RejectionConfig, argv)
    print_config(config)
    targets = config.target_counts()
    if "code" in targets and "code" not in config.judge_domains:  # the sandbox refused: fail now, not in a worker
        Sandbox(SandboxLimits(allow_rlimit_only=config.allow_rlimit_only))
    # The projection keeps its own log: the stage's is a prefix of every shard in order, which a projection
    # rerun (other targets) would cut back to its first shards.
    log_name = "projection-verdicts.jsonl" if config.projection_file else "verdicts.jsonl"
    log = VerdictLog(Path(config.work_dir) / log_name, config.verdict_fingerprint())
    try:
        candidates = verify_pool(config, log)
    finally:
        log.close()
    if config.projection_file:
        project(config, candidates, targets)
        return
    known = set(candidates.domains) | ({NON_REASONING} if config.general_data else set())
    unknown = [domain for domain in targets if domain not in known]
    if unknown:
        raise ValueError(f"targets name domain(s) {unknown} that no sampled prompt has (domains: {sorted(known)}"
                         + ("" if config.general_data else f"; '{NON_REASONING}' needs --general_data") + ")")
    judged = judge_candidates(config, candidates) if config.judge_model else None
    capped = cap_per_prompt(candidates, config)
    pools: dict[str, list] = {}
    for i in capped:
        pools.setdefault(candidates.domains[candidates.domain[i]], []).append(i)
    if config.general_data:
        pools[NON_REASONING] = general_examples(config.general_data)
    samples_per_prompt = max(candidates.candidates_per_prompt.values(), default=0)
    mixture = assemble(pools, targets, config.allow_shortfall, config.seed, samples_per_prompt, config.max_per_prompt)

    inputs = {**({"general_data": config.general_data} if config.general_data else {}),
              **{f"shard_{i}": p for i, p in enumerate(config.shards)}}
    if config.judge_model:
        inputs["judge_model"] = config.judge_model
    with staged_output(config.output_dir, config.stage, config, inputs) as (scratch, headline):
        write_mixture(scratch / MIXTURE, mixture, candidates, config.shards, response_format(config.template))
        headline.update({
            "candidates": candidates.total,
            "removed": dict(candidates.removed),
            "kept_reasoning": len(capped),
            **({"judged": judged} if judged is not None else {}),
            "available": {domain: len(pool) for domain, pool in pools.items()},
            "selected": dict(Counter(candidates.domains[candidates.domain[item]] if isinstance(item, int)
                                     else item["domain"] for item in mixture)),
            "total": len(mixture),
        })
    print(f"mixture: {json.dumps(headline)}")


if __name__ == "__main__":
    main()
