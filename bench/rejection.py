"""Rejection-sampling throughput and memory: `python -m stages.rejection_sampling` end to end (stream the
generation shards through the worker pool, verify and filter every candidate, assemble the mixture
with the general data, write mixture.parquet and the manifest) on seeded synthetic pools shaped like
Dev2's samples, one pool per size in `--candidates`.

    .venv/bin/python bench/rejection.py --candidates 200000 600000

The pool: `--samples_per_prompt` responses per prompt in the chat format (`<think>` block of a few
hundred words in blank-line-separated paragraphs, then a summary with \\boxed{answer}); answers
mostly integers and simple fractions, some decimals and LaTeX (radicals, multiples of pi,
intervals, tuples, text), right and wrong, sometimes in an equivalent form; some responses cut off
before the summary, badly formatted, with Chinese in the reasoning, looping, with an over-long
paragraph or code in the reasoning, or duplicated. Written as JSONL shards in a temporary directory,
with a small general parquet; the filters are those of `--config` (default configs/paper.yaml).

Each size runs the stage once, as a process of its own with the Snakefile's flags. Printed per size:
wall time, candidates/s, CPU (the stage, its workers and their math-verify processes), and peak RSS
of the stage's main process (what grows with the pool, if anything does) and of its largest worker
or verifier process (bounded by one chunk). Then how the main process's peak grows across sizes, a
projection to `--paper_candidates` candidates of `--paper_chars` characters (CPU-hours, wall hours
on a `--node_cores` node, memory), whether that meets the target, and the command.
"""

import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from stages.lib.artifacts import read_manifest  # noqa: E402
from stages.lib.data.schema import SCHEMAS  # noqa: E402
from stages.rejection_sampling import CHUNK_BYTES  # noqa: E402

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


STAGE = """import resource, runpy, sys
sys.argv[0] = "stages.rejection_sampling"
try:
    # workers unpickle __main__'s functions
    runpy.run_module("stages.rejection_sampling", run_name="__main__", alter_sys=True)
finally:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    print("rusage", own.ru_maxrss, children.ru_maxrss, own.ru_utime + own.ru_stime,
          children.ru_utime + children.ru_stime, file=sys.stderr)
"""


CHUNK_MIB = CHUNK_BYTES / 2**20


def run_stage(argv: list[str]) -> dict:
    """The stage as a process of its own; its own and its children's peak RSS (KiB) and CPU seconds."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", STAGE, *argv], cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f"the stage failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    fields = next(line for line in done.stderr.splitlines() if line.startswith("rusage ")).split()[1:]
    main_kib, children_kib, own_cpu, children_cpu = int(fields[0]), int(fields[1]), float(fields[2]), float(fields[3])
    return {"wall": wall, "main_mib": main_kib / 1024, "child_mib": children_kib / 1024, "own_cpu": own_cpu,
            "children_cpu": children_cpu}


def stage_argv(shards, general, output_dir, targets, filters: dict) -> list[str]:
    """The flags the Snakefile passes (rules/rejection_sampling.smk), the filters from the config."""
    argv = ["--shards", *shards, "--general_data", str(general), "--targets",
            *[f"{d}={n}" for d, n in targets.items()], "--template", "chat", "--language", "en",
            "--output_dir", str(output_dir), "--seed", "0"]
    for key, value in filters.items():
        argv += [f"--{key}", str(value).lower() if isinstance(value, bool) else str(value)]
    return argv


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--candidates", type=int, nargs="+", default=[200000],
                        help="Pool sizes, each run by itself "
                             "(ascending: the memory check compares the last to the first).")
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
    parser.add_argument("--max_memory_growth", type=float, default=1.3,
                        help="Largest allowed ratio of the main process's peak RSS "
                             "at the largest size to the smallest.")
    parser.add_argument("--num_workers", type=int, default=0,
                        help="The stage's worker processes (0: every CPU here, as the stage defaults).")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    sizes = sorted(args.candidates)

    config_filters = yaml.safe_load(args.config.read_text())["rejection_sampling"]["filters"]
    filters = {**config_filters, "allow_shortfall": True,  # a short pool shows in `selected`, it does not fail the run
               "num_workers": args.num_workers}
    workers = args.num_workers or len(os.sched_getaffinity(0))
    print(f"filters ({args.config.name}): {json.dumps(filters)}; {workers} worker process(es)")
    # The mixture's size is the config's, not the pool's: the same targets at every size (the paper's
    # kept share of the smallest pool), so what grows with the pool shows alone.
    reasoning_target = round(sizes[0] * 600_000 / args.paper_candidates)
    targets = {"math": reasoning_target, "general": max(1, reasoning_target // 3)}
    print(f"targets at every size: {json.dumps(targets)}")
    print("candidates  prompts  shards MiB  mean chars  wall s  cand/s  CPU s  cores busy  main RSS MiB  "
          "largest child RSS MiB")
    results = []
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="bench-rejection-") as workdir:
            workdir = Path(workdir)
            shards, pool = write_pool(workdir, n, args.samples_per_prompt, args.shards, args.mean_words, args.seed)
            write_general(workdir / "general.parquet", round(targets["general"] * 1.1) + 10, args.seed)
            shard_mib = sum(Path(p).stat().st_size for p in shards) / 2**20
            argv = stage_argv(shards, workdir / "general.parquet", workdir / "mixture", targets, filters)
            measured = run_stage(argv + ["--work_dir", str(workdir / "work")])
            metrics = read_manifest(workdir / "mixture")["metrics"]
            rows = pq.read_metadata(workdir / "mixture" / "mixture.parquet").num_rows
        cpu = measured["own_cpu"] + measured["children_cpu"]
        results.append({"n": n, "chars": pool["chars"] / n, "cpu": cpu, **measured})
        print(f"{n:>10,}  {pool['prompts']:>7,}  {shard_mib:>10,.0f}  {pool['chars'] / n:>10,.0f}  "
              f"{measured['wall']:>6.1f}  {n / measured['wall']:>6,.0f}  {cpu:>5.1f}  "
              f"{cpu / measured['wall']:>10.2f}  {measured['main_mib']:>12,.0f}  {measured['child_mib']:>21,.0f}")
        print(f"    removed: {json.dumps(metrics['removed'])}; kept reasoning {metrics['kept_reasoning']:,}; "
              f"selected {json.dumps(metrics['selected'])}; mixture rows {rows:,}")

    first, last = results[0], results[-1]
    growth = last["main_mib"] / first["main_mib"]
    per_candidate = (last["main_mib"] - first["main_mib"]) / (last["n"] - first["n"]) if len(results) > 1 else 0.0
    paper_mib = last["main_mib"] + max(per_candidate, 0.0) * (args.paper_candidates - last["n"])
    if len(results) > 1:
        print(f"memory: at {last['n'] / first['n']:.1f}x the candidates the main process's peak RSS is {growth:.2f}x "
              f"({'within' if growth <= args.max_memory_growth else 'OVER'} {args.max_memory_growth}x); "
              f"{per_candidate * 2**20:,.0f} bytes per candidate")
    print(f"projection to {args.paper_candidates:,} candidates of {args.paper_chars:,} characters: main process about "
          f"{paper_mib:,.0f} MiB (per-candidate state does not grow with length), each worker bounded by a "
          f"{CHUNK_MIB:g} MiB chunk and its verifier processes (here {last['child_mib']:,.0f} MiB at most)")
    cpu_hours = last["cpu"] / last["n"] * args.paper_candidates / 3600
    stretch = args.paper_chars / last["chars"]
    long_cpu_hours = cpu_hours * stretch
    print(f"CPU: {cpu_hours:.2f} CPU-hours at this pool's length, {long_cpu_hours:.2f} scaled to {args.paper_chars:,} "
          f"characters ({stretch:.1f}x; an upper bound, answer verification does not grow with length)")
    verdict = lambda hours: f"{'MET' if hours <= args.target_hours else 'NOT MET'} ({hours:.2f} h)"  # noqa: E731
    print(f"target: the full assembly under {args.target_hours:g} h wall on {args.node_cores} cores: "
          f"{verdict(cpu_hours / args.node_cores)} at this pool's length, "
          f"{verdict(long_cpu_hours / args.node_cores)} at {args.paper_chars:,} characters")
    print(f"command: python bench/rejection.py --candidates {' '.join(map(str, sizes))} --samples_per_prompt "
          f"{args.samples_per_prompt} --shards {args.shards} --mean_words {args.mean_words:g} --config "
          f"{args.config.relative_to(REPO) if args.config.is_relative_to(REPO) else args.config} "
          f"--paper_candidates {args.paper_candidates} --paper_chars {args.paper_chars} "
          f"--node_cores {args.node_cores} --num_workers {args.num_workers} --seed {args.seed}")
    if len(results) > 1 and growth > args.max_memory_growth:
        raise SystemExit(f"the main process's peak RSS grew {growth:.2f}x over {last['n'] / first['n']:.1f}x the "
                         f"candidates (allowed: {args.max_memory_growth}x)")


if __name__ == "__main__":
    main()
