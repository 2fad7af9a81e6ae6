"""Memory of a GRPO process's prompts when code rows carry large test lists.

The real code set (open-r1/verifiable-coding-problems-python) holds ~145 KB of test cases per row, ~5 GB
in all, and every process of a GRPO job builds the prompt dataset. This builds a seeded code set of
`--rows` rows with `--tests_kb` KB of stdin/stdout cases each, written as prepare_data writes it
(stages.lib.data.schema.write_rows), and measures in a fresh process each:

- `streamed`: what stages.grpo runs: prompt_dataset (rows read a few at a time, `tests_at` references
  kept), then the code reward's reader (TestCases) fetching every row's cases once, prompts in shuffled
  order (the worst case: a rollout asks for a prompt's samples together, which reuse its decoded group);
- `whole`: the set read whole and kept as Python rows (what stages.grpo did before).

Peak RSS growth over the process's state after its imports (VmHWM, reset then: Linux), and the reader's time per
row, at each set size. Exits 1 when the streamed path's growth at the largest set exceeds
`--max_memory_growth` times its growth at the smallest (its memory must not follow the set's size).

    .venv/bin/python bench/code_tests.py --rows 1000 3000 --tests_kb 145
"""

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

MEASURE = r"""
import json, random, sys, time
sys.path.insert(0, sys.argv[1])
from stages.grpo import prompt_dataset
from stages.lib.data.schema import TestCases, read_table
from stages.lib.templates import CHAT

def status(key):  # MB
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(key)) / 1024

mode, path = sys.argv[2], sys.argv[3]
with open("/proc/self/clear_refs", "w") as clear:
    clear.write("5")  # resets the peak (VmHWM) to the present: the imports' peak does not count
before = status("VmRSS")
started = time.perf_counter()
lookup_s = 0.0
if mode == "streamed":
    dataset = prompt_dataset([path], CHAT)
    references = list(dataset["tests_at"])
    random.Random(0).shuffle(references)
    reader, fetched = TestCases(), 0
    lookup_started = time.perf_counter()
    for reference in references:
        fetched += len(reader(reference))
    lookup_s = (time.perf_counter() - lookup_started) / len(references)
else:
    rows = read_table(path, "reasoning").to_pylist()
    fetched = sum(len(row["tests"]) for row in rows)
print(json.dumps({"growth_mb": status("VmHWM") - before, "seconds": time.perf_counter() - started,
                  "lookup_ms": lookup_s * 1000, "fetched_mb": fetched / 2**20}))
"""


def write_code_set(path: Path, rows: int, tests_kb: int, seed: int) -> int:
    """A reasoning set of code rows, each with ~tests_kb KB of stdin/stdout cases; returns the tests' bytes."""
    from stages.lib.data.schema import write_rows

    rng = random.Random(seed)
    table, total = [], 0
    for index in range(rows):
        cases, size = [], 0
        while size < tests_kb * 1024:
            numbers = " ".join(str(rng.randrange(10**9)) for _ in range(rng.randrange(20, 200)))
            case = {"input": numbers + "\n", "output": f"{sum(map(int, numbers.split()))}\n"}
            cases.append(case)
            size += len(case["input"]) + len(case["output"])
        tests = json.dumps(cases)
        total += len(tests)
        table.append({"id": f"code-{index}", "prompt": f"Print the sum of the numbers on stdin ({index}).",
                      "solution": "", "level": 1, "domain": "code", "worked_solution": "", "tests": tests})
    write_rows(table, "reasoning", path)
    return total


def measure(mode: str, path: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", MEASURE, str(REPO), mode, str(path)], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{mode} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[1000, 3000],
                        help="set sizes; the streamed path's memory must not grow with the set")
    parser.add_argument("--tests_kb", type=int, default=145, help="test cases per row (the real set: ~145 KB)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max_memory_growth", type=float, default=1.3,
                        help="the streamed path's peak RSS growth at the largest set, over that at the smallest")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    sizes = sorted(args.rows)
    print("| rows | tests | mode | peak RSS growth | wall | reader per row |")
    print("|---|---|---|---|---|---|")
    growth = {}
    for rows in sizes:
        with tempfile.TemporaryDirectory() as directory:
            path = Path(directory) / "rl_prompts.parquet"
            tests_mb = write_code_set(path, rows, args.tests_kb, args.seed) / 2**20
            modes = ("streamed", "whole") if rows in (sizes[0], sizes[-1]) else ("streamed",)
            for mode in modes:
                result = measure(mode, path)
                growth[rows, mode] = result["growth_mb"]
                per_row = f"{result['lookup_ms']:.1f} ms" if mode == "streamed" else "-"
                print(f"| {rows:,} | {tests_mb:.0f} MB | {mode} | {result['growth_mb']:.0f} MB | "
                      f"{result['seconds']:.1f} s | {per_row} |", flush=True)
    ratio = growth[sizes[-1], "streamed"] / max(1.0, growth[sizes[0], "streamed"])
    whole = growth[sizes[-1], "whole"] / max(1.0, growth[sizes[0], "whole"])
    verdict = "within" if ratio <= args.max_memory_growth else "OVER"
    print(f"at {sizes[-1] / sizes[0]:.1f}x the rows the streamed path's peak RSS growth is {ratio:.2f}x "
          f"({verdict} {args.max_memory_growth}x); holding the set whole: {whole:.2f}x")
    print(f"command: python bench/code_tests.py --rows {' '.join(map(str, sizes))} --tests_kb {args.tests_kb} "
          f"--seed {args.seed}")
    if len(sizes) > 1 and ratio > args.max_memory_growth:
        raise SystemExit(f"the streamed prompts' memory grew {ratio:.2f}x with {sizes[-1] / sizes[0]:.1f}x the rows "
                         f"(allowed: {args.max_memory_growth}x)")


if __name__ == "__main__":
    main()
