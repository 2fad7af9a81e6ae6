"""Rejection-sampling throughput: `stages.rejection.main` end to end (read the generation shards,
verify and filter every candidate, assemble the mixture with the general data, write
mixture.parquet and the manifest) on a seeded synthetic pool shaped like Dev2's samples.

    .venv/bin/python bench/rejection.py --candidates 200000

The pool: `--samples_per_prompt` responses per prompt in the chat format (`<think>` block of a few
hundred words in blank-line-separated paragraphs, then a summary with \\boxed{answer}); answers
mostly integers and simple fractions, some decimals and LaTeX (radicals, multiples of pi,
intervals, tuples, text), right and wrong, sometimes in an equivalent form; some responses cut off
before the summary, badly formatted, with Chinese in the reasoning, looping, with an over-long
paragraph or code in the reasoning, or duplicated. Written as JSONL shards in a temporary directory,
with a small general parquet; the filters are those of `--config` (default configs/paper.yaml).

The stage runs once, through its real command line; its phases are timed inside that one run by
wrapping the module's own functions (read_shards, filter_reasoning, general_examples, assemble,
staged_output: writing the mixture and the manifest). CPU time is this process plus its reaped
children (the stage's worker processes and their math-verify processes). Prints candidates/s
overall and per phase, how many cores the workers kept busy, the removals per reason, peak memory,
a projection to `--paper_candidates` (CPU-hours, and wall hours on a `--node_cores` node if the
workers keep every core busy), whether that meets the target (`--target_hours` of wall time on that
node), and the command. `--num_workers 1` runs the stage in one process and also counts the
verifier's symbolic calls and timeouts.
"""

import argparse
import contextlib
import io
import json
import math
import os
import random
import resource
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from stages import rejection as stage  # noqa: E402
from stages.artifacts import read_manifest  # noqa: E402
from stages.data.schema import SCHEMAS  # noqa: E402

WORDS = """the of and to a in is that for it as with be by this are from or at an which we so if then
let number value sum product term terms equation side sides both divide multiply add subtract gives
get check result answer case cases first second third next now since because therefore thus hence
wait actually maybe hmm compute find solve factor root roots square cube prime even odd integer
integers fraction ratio area length angle triangle circle radius point line slope function graph
polynomial degree coefficient constant variable expression simplify expand substitute plug back
original problem means need must should could would try again another way verify works fails true
false correct wrong careful note recall formula rule identity sequence series digit digits count
remainder modulo divisible greater less equal positive negative total each every only possible
minimum maximum probability choose ways pairs order inside outside left right top bottom half twice
times plus minus over under between among given known unknown assume suppose consider look step""".split()
CHINESE = "我们需要计算这个方程的解所以答案是因为等于首先然后检查一下结果正确吗再看看"
CODE = "```python\nfrom math import comb\nprint(sum(comb(10, k) for k in range(4)))\n```"
TEXT_ANSWERS = ["east", "west", "even", "odd", "Tuesday", "yes", "no", "circle"]


def sentence(rng: random.Random) -> str:
    words = rng.choices(WORDS, k=rng.randint(6, 18))
    spot = rng.randrange(len(words))
    if rng.random() < 0.5:
        a, b = rng.randint(1, 999), rng.randint(1, 99)
        words[spot] = f"{a} + {b} = {a + b}" if rng.random() < 0.5 else f"${a} \\cdot {b} = {a * b}$"
    return " ".join(words).capitalize() + "."


def paragraph_bank(rng: random.Random, size: int) -> list[tuple[str, int]]:
    """Paragraphs of 30-110 words (under 2,000 characters), with their word counts."""
    bank = []
    for _ in range(size):
        text, words = [], 0
        target = rng.randint(30, 110)
        while words < target:
            text.append(sentence(rng))
            words += len(text[-1].split())
        bank.append((" ".join(text), words))
    return bank


def gold_answer(rng: random.Random) -> tuple[str, list[str], list[str]]:
    """(gold, equivalent forms, wrong forms): integers most, then fractions, decimals, LaTeX kinds."""
    roll = rng.random()
    n = int(rng.lognormvariate(3.5, 1.6)) * (-1 if rng.random() < 0.08 else 1)
    m = n + rng.choice([-2, -1, 1, 2, 10]) if rng.random() < 0.7 else rng.randint(0, 2000)
    if roll < 0.68:
        return str(n), [str(n), str(n), str(n), f"{n}.0", f"{n:,}"], [str(m), f"{m}.5"]
    if roll < 0.83:
        b = rng.randint(2, 64)
        a = rng.choice([k for k in range(1, 3 * b) if math.gcd(k, b) == 1])
        return (f"\\frac{{{a}}}{{{b}}}", [f"\\frac{{{a}}}{{{b}}}", f"\\dfrac{{{a}}}{{{b}}}", f"{a}/{b}"],
                [f"\\frac{{{b}}}{{{a}}}", f"\\frac{{{a + 1}}}{{{b}}}", str(a)])
    if roll < 0.86:
        d = f"{rng.randint(0, 99)}.{rng.randint(1, 99):02d}"
        return d, [d, d + "0"], [d + "1", d[:-1]]
    k, j, q = rng.randint(2, 9), rng.choice([2, 3, 5, 6, 7]), rng.randint(1, 9)
    kind = rng.randrange(5)
    if kind == 0:
        return (f"{k}\\sqrt{{{j}}}", [f"{k}\\sqrt{{{j}}}", f"\\sqrt{{{k * k * j}}}"],
                [f"{k}\\sqrt{{{j + 1}}}", f"{k * j}"])
    if kind == 1:
        return f"{k}\\pi", [f"{k}\\pi", f"\\pi {k}"], [f"{k + 1}\\pi", f"\\frac{{{k}\\pi}}{{2}}"]
    if kind == 2:
        return f"(-{k}, {q}]", [f"(-{k}, {q}]", f"(-{k},{q}]"], [f"[-{k}, {q}]", f"(-{k}, {q})"]
    if kind == 3:
        return f"({k}, {q})", [f"({k}, {q})", f"({k},{q})"], [f"({q}, {k + q})", f"({k}, {q + 1})"]
    word = rng.choice(TEXT_ANSWERS)
    return f"\\text{{{word}}}", [f"\\text{{{word}}}", word], [f"\\text{{{rng.choice(TEXT_ANSWERS)}}}x"]


def completion(rng: random.Random, bank, answer: str, pid: int, sample: int, mean_words: float) -> tuple[str, str]:
    """One response and the defect it was given ('' for none)."""
    target = min(3000, max(100, rng.lognormvariate(math.log(mean_words) - 0.18, 0.6)))
    paragraphs, words = [f"Okay, let me work on problem {pid} (attempt {sample}) step by step."], 12
    while words < target:
        text, count = bank[rng.randrange(len(bank))]
        paragraphs.append(text)
        words += count
    summary = (f"{sentence(rng)} {sentence(rng)}\n\nTherefore, the final answer is $\\boxed{{{answer}}}$.")
    roll, defect = rng.random(), ""
    if roll < 0.025:  # cut off by the length limit: no summary
        think = "\n\n".join(paragraphs)
        return "<think>\n" + think[: rng.randrange(len(think) // 2, len(think))], "truncated"
    if roll < 0.055:
        defect = "bad_format"
        if rng.random() < 0.5:
            paragraphs.insert(rng.randrange(1, len(paragraphs)), "<think>")
        else:
            summary += f"\n<answer>{answer}</answer>"
    elif roll < 0.095:
        defect = "mixed_language"
        for _ in range(rng.randint(1, 4)):  # a phrase of Han characters, each a word: well under 95% English
            at = rng.randrange(1, len(paragraphs))
            paragraphs[at] += " " + "".join(rng.choices(CHINESE, k=rng.randint(15, 40)))
    elif roll < 0.105:  # a few Han characters: over 95% English, kept at the paper's threshold
        paragraphs[rng.randrange(1, len(paragraphs))] += " 所以答案是"
    elif roll < 0.135:
        defect = "repetition"
        loop = paragraphs[-1]
        paragraphs += [loop] * max(3, 2 * len(paragraphs))
    elif roll < 0.145:
        defect = "long_paragraph"
        at = rng.randrange(1, len(paragraphs) - 4) if len(paragraphs) > 5 else 1
        paragraphs[at: at + 5] = [" ".join(paragraphs[at: at + 5]) + " " + " ".join(sentence(rng) for _ in range(20))]
    elif roll < 0.155:
        defect = "code_in_reasoning"
        paragraphs.insert(rng.randrange(1, len(paragraphs) + 1), CODE)
    return "<think>\n" + "\n\n".join(paragraphs) + "\n</think>\n\n" + summary, defect


def write_pool(workdir: Path, candidates: int, samples_per_prompt: int, shards: int, mean_words: float,
               seed: int) -> tuple[list[str], dict]:
    """JSONL shards as stages.generate writes them (round-robin prompts); returns paths and pool stats."""
    rng = random.Random(seed)
    bank = paragraph_bank(rng, 4000)
    paths = [workdir / f"shard-{i}.jsonl" for i in range(shards)]
    files = [open(path, "w", encoding="utf-8") for path in paths]
    stats = {"prompts": 0, "chars": 0, "correct": 0, "defects": {}}
    written, pid = 0, 0
    try:
        while written < candidates:
            gold, same, wrong = gold_answer(rng)
            accuracy = rng.uniform(0.05, 0.95)
            prompt = f"Problem {pid}: " + " ".join(rng.choices(WORDS, k=rng.randint(15, 60))) + "?"
            previous = []
            for sample in range(min(samples_per_prompt, candidates - written)):
                if previous and rng.random() < 0.02:  # the same response sampled twice (whitespace aside)
                    text, defect = rng.choice(previous) + rng.choice(["", " ", "\n"]), "duplicate"
                else:
                    correct = rng.random() < accuracy
                    stats["correct"] += correct
                    answer = rng.choice(same if correct else wrong)
                    text, defect = completion(rng, bank, answer, pid, sample, mean_words)
                    previous.append(text)
                stats["defects"][defect or "none"] = stats["defects"].get(defect or "none", 0) + 1
                stats["chars"] += len(text)
                row = {"id": f"p{pid}", "sample": sample, "prompt": prompt, "solution": gold, "domain": "math",
                       "completion": text, "num_tokens": len(text) // 4, "finished": defect != "truncated"}
                files[pid % shards].write(json.dumps(row) + "\n")
                written += 1
            pid += 1
    finally:
        for f in files:
            f.close()
    stats["prompts"] = pid
    return [str(p) for p in paths], stats


def write_general(path: Path, rows: int, seed: int) -> None:
    rng = random.Random(seed + 1)
    table = []
    for i in range(rows):
        j = rng.randrange(rows) if rng.random() < 0.05 else i  # some repeated instructions
        table.append({"id": f"g{i}", "prompt": f"Instruction {j}: " + " ".join(random.Random(j).choices(WORDS, k=25)),
                      "reference": " ".join(random.Random(-j).choices(WORDS, k=120)) + ".", "domain": "general"})
    pq.write_table(pa.Table.from_pylist(table, schema=SCHEMAS["general"]), path)


def cpu_now() -> tuple[float, float, float]:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter(), own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


class Phases:
    """Wall and CPU (own, children) seconds of the stage's functions, timed inside the real run."""

    def __init__(self):
        self.times: dict[str, list[float]] = {}
        self.verifiers = []

    def add(self, name: str, start: tuple[float, float, float]) -> None:
        end = cpu_now()
        self.times[name] = [a + (e - s) for a, e, s in zip(self.times.get(name, [0, 0, 0]), end, start)]

    def wrap(self, name: str, function):
        def timed(*args, **kwargs):
            start = cpu_now()
            try:
                return function(*args, **kwargs)
            finally:
                self.add(name, start)
        return timed

    def wrap_output(self, staged_output):
        @contextmanager
        def timed(*args, **kwargs):
            start = cpu_now()
            with staged_output(*args, **kwargs) as value:
                yield value
            self.add("write", start)
        return timed

    @contextmanager
    def installed(self):
        saved = {name: getattr(stage, name) for name in
                 ("read_shards", "filter_reasoning", "general_examples", "assemble", "staged_output", "AnswerVerifier")}
        phases = self

        class CountedVerifier(saved["AnswerVerifier"]):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                phases.verifiers.append(self)

        for name in ("read_shards", "filter_reasoning", "general_examples", "assemble"):
            setattr(stage, name, self.wrap(name, saved[name]))
        stage.staged_output = self.wrap_output(saved["staged_output"])
        stage.AnswerVerifier = CountedVerifier
        try:
            yield
        finally:
            for name, value in saved.items():
                setattr(stage, name, value)


def stage_argv(shards, general, output_dir, targets, filters: dict) -> list[str]:
    """The flags the Snakefile passes (rules/rejection.smk), the filters from the config."""
    argv = ["--shards", *shards, "--general_data", str(general), "--targets",
            *[f"{d}={n}" for d, n in targets.items()], "--template", "chat", "--language", "en",
            "--output_dir", str(output_dir), "--seed", "0"]
    for key, value in filters.items():
        argv += [f"--{key}", str(value).lower() if isinstance(value, bool) else str(value)]
    return argv


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--candidates", type=int, default=200000)
    parser.add_argument("--samples_per_prompt", type=int, default=16)
    parser.add_argument("--shards", type=int, default=8, help="JSONL shard files the pool is split into.")
    parser.add_argument("--mean_words", type=float, default=600, help="Mean words of a <think> block.")
    parser.add_argument("--config", type=Path, default=REPO / "configs" / "paper.yaml",
                        help="Config whose rejection_sampling.filters are applied.")
    parser.add_argument("--paper_candidates", type=int, default=4_000_000,
                        help="Candidates to filter at full scale (paper: ~800K kept, 600K of them reasoning).")
    parser.add_argument("--paper_chars", type=int, default=18000,
                        help="Mean completion characters at full scale (~5K tokens at ~3.6 characters a token), "
                             "for the length-scaled projection.")
    parser.add_argument("--node_cores", type=int, default=32)
    parser.add_argument("--target_hours", type=float, default=1.0, help="Wall-time target on the node.")
    parser.add_argument("--num_workers", type=int, default=0,
                        help="The stage's worker processes (0: every CPU here, as the stage defaults).")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    filters = yaml.safe_load(args.config.read_text())["rejection_sampling"]["filters"]
    reasoning_target = round(args.candidates * 600_000 / args.paper_candidates)  # the paper's kept share
    targets = {"math": reasoning_target, "general": max(1, reasoning_target // 3)}
    filters = {**filters, "allow_shortfall": True,  # a short pool shows in `selected`, it does not fail the run
               "num_workers": args.num_workers}
    workers = args.num_workers or len(os.sched_getaffinity(0))

    with tempfile.TemporaryDirectory(prefix="bench-rejection-") as workdir:
        workdir = Path(workdir)
        started = time.perf_counter()
        shards, pool = write_pool(workdir, args.candidates, args.samples_per_prompt, args.shards, args.mean_words,
                                  args.seed)
        write_general(workdir / "general.parquet", round(targets["general"] * 1.1) + 10, args.seed)
        pool_s = time.perf_counter() - started
        shard_bytes = sum(Path(p).stat().st_size for p in shards)

        phases, log = Phases(), io.StringIO()
        argv = stage_argv(shards, workdir / "general.parquet", workdir / "mixture", targets, filters)
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        start = cpu_now()
        with phases.installed(), contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            stage.main(argv)
        end = cpu_now()
        metrics = read_manifest(workdir / "mixture")["metrics"]
        mixture_rows = pq.read_metadata(workdir / "mixture" / "mixture.parquet").num_rows

    wall, own, children = (e - s for e, s in zip(end, start))
    cpu = own + children
    n = args.candidates
    print(f"pool: {n:,} candidates, {pool['prompts']:,} prompts x {args.samples_per_prompt} samples, "
          f"{len(shards)} shards, {shard_bytes / 2**20:.0f} MiB JSONL, mean completion {pool['chars'] / n:,.0f} chars; "
          f"built in {pool_s:.0f} s (not timed)")
    print(f"pool defects as generated: {json.dumps(pool['defects'])}; correct answers drawn: {pool['correct']:,}")
    print(f"filters ({args.config.name}): {json.dumps({k: v for k, v in filters.items()})}; "
          f"targets: {json.dumps(targets)}")
    print(f"stages.rejection.main with {workers} worker process(es): wall {wall:.1f} s, {n / wall:,.0f} candidates/s; "
          f"CPU {cpu:.1f} s (own {own:.1f} s, worker and verifier processes {children:.1f} s), {n / cpu:,.0f} "
          f"candidates per CPU-s; {cpu / wall:.2f} cores busy on average")
    print("phase             wall s   cand/s (wall)   CPU s (own + workers)")
    other = [wall, own, children]
    for name in ("read_shards", "filter_reasoning", "general_examples", "assemble", "write"):
        w, o, c = phases.times.get(name, [0.0, 0.0, 0.0])
        other = [x - y for x, y in zip(other, (w, o, c))]
        label = "write+manifest" if name == "write" else name
        print(f"{label:<16} {w:>7.1f} {n / w if w else float('inf'):>15,.0f}   {o + c:>7.1f} ({o:.1f} + {c:.1f})")
    print(f"{'other':<16} {other[0]:>7.1f} {'':>15}   {other[1] + other[2]:>7.1f} (parse flags, count prompts, "
          "build conversations)")
    print(f"removed: {json.dumps(metrics['removed'])}; kept reasoning {metrics['kept_reasoning']:,}; "
          f"selected {json.dumps(metrics['selected'])}; mixture rows {mixture_rows:,}")
    verifiers = phases.verifiers
    if verifiers:  # only seen in this process: with worker processes each has its own
        print(f"verifier: {sum(v.symbolic_calls for v in verifiers):,} symbolic (math-verify) calls, "
              f"{sum(v.timeouts for v in verifiers)} timeouts, {sum(v.worker_deaths for v in verifiers)} worker deaths")
    peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    held_gib = peak_gib - rss_before
    print(f"peak RSS of this process: {peak_gib:.2f} GiB, {held_gib:.2f} GiB over the {rss_before:.2f} GiB before "
          "the stage ran (it holds every candidate in memory)")

    cpu_hours = cpu / n * args.paper_candidates / 3600
    node_hours = cpu_hours / args.node_cores
    print(f"projection to {args.paper_candidates:,} candidates (rate-based, this pool's completion length): "
          f"{cpu_hours:.2f} CPU-hours; {node_hours:.2f} h wall on {args.node_cores} cores if the stage's worker "
          f"processes keep every core busy (here {workers} worker(s) kept {cpu / wall:.2f} cores busy)")
    stretch = args.paper_chars / (pool["chars"] / n)
    long_cpu_hours = cpu * stretch / n * args.paper_candidates / 3600
    print(f"length-scaled: at {args.paper_chars:,} characters a completion ({stretch:.1f}x this pool; all CPU scaled "
          f"by that, an upper bound since answer verification does not grow with length): {long_cpu_hours:.2f} "
          f"CPU-hours, {long_cpu_hours / args.node_cores:.2f} h on {args.node_cores} cores; memory about "
          f"{held_gib / n * args.paper_candidates * stretch:,.0f} GiB to hold the pool")
    verdict = lambda hours: f"{'MET' if hours <= args.target_hours else 'NOT MET'} ({hours:.2f} h)"  # noqa: E731
    print(f"target: the full assembly under {args.target_hours:g} h wall on {args.node_cores} cores: "
          f"{verdict(node_hours)} at this pool's length, {verdict(long_cpu_hours / args.node_cores)} at "
          f"{args.paper_chars:,} characters")
    print(f"command: python bench/rejection.py --candidates {args.candidates} --samples_per_prompt "
          f"{args.samples_per_prompt} --shards {args.shards} --mean_words {args.mean_words:g} --config "
          f"{args.config.relative_to(REPO) if args.config.is_relative_to(REPO) else args.config} "
          f"--paper_candidates {args.paper_candidates} --paper_chars {args.paper_chars} "
          f"--node_cores {args.node_cores} --num_workers {args.num_workers} --seed {args.seed}")


if __name__ == "__main__":
    main()
