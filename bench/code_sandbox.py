"""Code-reward throughput: `--programs` trivial correct programs (read two numbers, print their sum),
each against one stdin/stdout case, through the `code` reward (sandboxed, as many at once as there
are cores), and the same programs as bare subprocesses (`python3 -I`, same limits, no bubblewrap)
one at a time, to show the sandbox's own cost per run.

    .venv/bin/python bench/code_sandbox.py --programs 1000

Prints programs/s through the reward, the mean wall time of one sandboxed run and of one bare run
(both sequential, so the difference is the sandbox's overhead), and the command. With
`--parent_gib N` the sequential sandboxed runs are timed again after this process has touched N GiB,
as a GRPO trainer holding its model and optimizer does (starting a child must not copy the parent).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from stages.lib.rewards.functions import RewardSettings, build_reward_functions

PROGRAM = "a, b = map(int, input().split())\nprint(a + b)\n"


def bare_run_s(runs: int) -> float:
    with tempfile.TemporaryDirectory() as directory:
        Path(directory, "main.py").write_text(PROGRAM)
        started = time.perf_counter()
        for i in range(runs):
            done = subprocess.run(["/usr/bin/python3", "-I", "main.py"], input=f"{i} 1\n", capture_output=True,
                                  text=True, cwd=directory, env={"PATH": "/usr/bin:/bin"})
            assert done.stdout.strip() == str(i + 1)
        return (time.perf_counter() - started) / runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--programs", type=int, default=1000)
    parser.add_argument("--sequential_runs", type=int, default=100, help="Runs timed one at a time, each way.")
    parser.add_argument("--parent_gib", type=float, default=0, help="Also time runs from a parent holding this much.")
    args = parser.parse_args()

    (reward,) = build_reward_functions(["code"], RewardSettings(template="chat"))
    completions = [f"<think>\nadd them\n</think>\n\n```python\n{PROGRAM}```" for _ in range(args.programs)]
    tests = [json.dumps([{"input": f"{i} {i}\n", "output": f"{2 * i}\n"}]) for i in range(args.programs)]
    started = time.perf_counter()
    scores = reward(completions=completions, tests=tests)
    parallel_s = time.perf_counter() - started
    assert scores == [1.0] * args.programs, "a correct program failed in the sandbox"

    sandbox = reward.grader.code.sandbox

    def sandboxed_run_s() -> float:
        started = time.perf_counter()
        for i in range(args.sequential_runs):
            assert sandbox.run(PROGRAM, stdin=f"{i} 1\n").stdout.strip() == str(i + 1)
        return (time.perf_counter() - started) / args.sequential_runs

    sandboxed_s = sandboxed_run_s()
    bare_s = bare_run_s(args.sequential_runs)
    if args.parent_gib:
        held = bytearray(int(args.parent_gib * (1 << 30)))
        held[::4096] = b"\1" * len(held[::4096])  # touch every page: resident, as a trainer's tensors are
        big_parent_s = sandboxed_run_s()
        del held
    reward.grader.close()

    cores = len(os.sched_getaffinity(0))
    print(f"{args.programs} programs through the code reward ({cores} at once, isolated={sandbox.isolated}): "
          f"{parallel_s:.1f} s, {args.programs / parallel_s:.1f} programs/s")
    print(f"one run at a time ({args.sequential_runs} each): sandboxed {sandboxed_s * 1000:.1f} ms, bare subprocess "
          f"{bare_s * 1000:.1f} ms, sandbox overhead {(sandboxed_s - bare_s) * 1000:.1f} ms per run "
          f"({sandboxed_s / bare_s:.2f}x)")
    if args.parent_gib:
        print(f"one sandboxed run from a parent holding {args.parent_gib:g} GiB: {big_parent_s * 1000:.1f} ms")
    print(f"command: python bench/code_sandbox.py --programs {args.programs} --sequential_runs {args.sequential_runs}"
          + (f" --parent_gib {args.parent_gib:g}" if args.parent_gib else ""))


if __name__ == "__main__":
    main()
