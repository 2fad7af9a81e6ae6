"""Answer-verification throughput: the project's accuracy reward against a plain single-process
loop of math_verify.parse + verify (the way peers call it), on one seeded corpus of (completion,
gold) pairs shaped like model output: long <think> blocks, \\boxed{} answers of every common kind
(integers, decimals, fractions, radicals, intervals, sets, matrices, percentages, text), right and
wrong, equivalent forms, and 1% adversarial answers that make sympy slow.

    .venv/bin/python bench/verify.py --pairs 20000 --time_limit 5

Prints pairs/s for both, the speed-up, the verdicts that differ where the plain loop finished in
time, the slowest pair of the project's path (hand-over to a math-verify worker to verdict or kill),
and the command. The plain loop runs in a child
process that is restarted when one pair exceeds the time limit (peers' loops would hang there).
"""

import argparse
import multiprocessing
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# (gold, equivalent forms, wrong forms) per answer kind
KINDS = [
    ("{n}", ["{n}", "{n}.0", "+{n}"], ["{m}", "{n}1"]),
    ("{d}", ["{d}", "{d}0"], ["{d}1"]),
    ("\\frac{{{n}}}{{{q}}}", ["\\frac{{{n}}}{{{q}}}", "{n}/{q}", "\\dfrac{{{n}}}{{{q}}}"], ["\\frac{{{q}}}{{{n}}}"]),
    ("{k}\\sqrt{{2}}", ["{k}\\sqrt{{2}}", "\\sqrt{{{k2x2}}}"], ["{k}\\sqrt{{3}}"]),
    ("(-{n}, {m}]", ["(-{n},{m}]", "(-{n}, {m}]"], ["[-{n}, {m}]", "(-{n}, {m})"]),
    ("\\{{{n}, {m}\\}}", ["\\{{{m}, {n}\\}}", "\\{{{n},{m}\\}}"], ["\\{{{n}\\}}"]),
    ("\\begin{{pmatrix}} {n} & {m} \\\\ 0 & 1 \\end{{pmatrix}}",
     ["\\begin{{pmatrix}} {n} & {m} \\\\ 0 & 1 \\end{{pmatrix}}"],
     ["\\begin{{pmatrix}} {m} & {n} \\\\ 0 & 1 \\end{{pmatrix}}"]),
    ("{n}\\%", ["{n}\\%", "{n}%"], ["{m}\\%"]),
    ("\\text{{{word}}}", ["\\text{{{word}}}", "{word}"], ["\\text{{{other}}}"]),
    ("x = {n}", ["x = {n}", "x={n}", "{n}"], ["x = {m}"]),
]
WORDS = ["east", "blue", "Tuesday", "even", "odd", "yes", "no", "circle"]
ADVERSARIAL = ["10^{10^{10^{10}}}", "9^{9^{9^{9^{9}}}}", "\\frac{" * 400 + "1", "{n}!!!!!!"]


def think_block(rng: random.Random) -> str:
    steps = [f"Step {i}: {rng.randint(1, 99)} + {rng.randint(1, 99)} gives a partial result, so we continue."
             for i in range(rng.randint(10, 80))]
    return "<think>\n" + "\n".join(steps) + "\n</think>\n\n"


def corpus(pairs: int, seed: int = 0) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    rows = []
    for _ in range(pairs):
        n, m, q, k = rng.randint(2, 999), rng.randint(2, 999), rng.randint(2, 97), rng.randint(2, 9)
        values = dict(n=n, m=m if m != n else m + 1, q=q, k=k, k2x2=2 * k * k,
                      d=f"{rng.randint(0, 99)}.{rng.randint(1, 9)}5",
                      word=rng.choice(WORDS), other="z" + rng.choice(WORDS))
        gold_form, same, wrong = rng.choice(KINDS)
        gold = gold_form.format(**values)
        if rng.random() < 0.01:
            answer = rng.choice(ADVERSARIAL).replace("{n}", str(n))  # raw LaTeX: not a format string
        else:
            answer = rng.choice(same if rng.random() < 0.6 else wrong).format(**values)
        rows.append((think_block(rng) + f"So the answer is $\\boxed{{{answer}}}$.", gold))
    return rows


def plain_worker(pairs, start, conn) -> None:
    """A peer's loop: parse the whole completion and the gold, verify; math-verify's own timeouts."""
    from math_verify import parse, verify

    for index in range(start, len(pairs)):
        completion, gold = pairs[index]
        try:
            verdict = bool(verify(parse(f"${gold}$"), parse(completion)))
        except Exception:
            verdict = False
        conn.send((index, verdict))


def run_plain(pairs, time_limit: float) -> tuple[dict[int, bool], float, int]:
    """Verdicts by index (missing: did not finish within the limit), wall time, pairs given up on."""
    context = multiprocessing.get_context("spawn")
    verdicts, given_up, start, started = {}, 0, 0, time.perf_counter()
    while start < len(pairs):
        receiver, sender = context.Pipe(duplex=False)
        process = context.Process(target=plain_worker, args=(pairs, start, sender), daemon=True)
        process.start()
        sender.close()
        grace = 15.0  # the child's start-up (importing sympy) is not the pair's fault
        while start < len(pairs):
            if not receiver.poll(time_limit + grace):
                process.kill()
                process.join()
                given_up += 1
                start += 1  # skip the pair that hung
                break
            index, verdict = receiver.recv()
            verdicts[index] = verdict
            start, grace = index + 1, 0.0
        else:
            process.join()
    return verdicts, time.perf_counter() - started, given_up


def run_project(pairs, time_limit: float, batch: int) -> tuple[list[bool], float, float, int]:
    """The accuracy reward as GRPO calls it: one batch of completions at a time."""
    from stages.lib.rewards.functions import RewardSettings, build_reward_functions

    (accuracy,) = build_reward_functions(["accuracy"], RewardSettings(template="chat", verify_timeout_s=time_limit))
    warm_up = ["\\sqrt{2}", "\\sqrt{3}", "\\sqrt{5}", "\\sqrt{7}"]  # every lane's worker starts, as in training
    accuracy(completions=[f"\\boxed{{{g}}}" for g in warm_up], solution=warm_up)
    verdicts, started = [], time.perf_counter()
    for first in range(0, len(pairs), batch):
        chunk = pairs[first:first + batch]
        scores = accuracy(completions=[c for c, _ in chunk], solution=[g for _, g in chunk])
        verdicts += [score == 1.0 for score in scores]
    elapsed = time.perf_counter() - started
    accuracy.grader.close()
    return verdicts, elapsed, accuracy.grader.verifier.slowest_s, len(accuracy.grader.verifier.lanes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=20000)
    parser.add_argument("--time_limit", type=float, default=5.0, help="Per-pair limit (s), both paths.")
    parser.add_argument("--batch", type=int, default=64, help="Completions per reward call (a GRPO step's share).")
    args = parser.parse_args()
    pairs = corpus(args.pairs)
    ours, ours_s, slowest, lanes = run_project(pairs, args.time_limit, args.batch)
    plain, plain_s, given_up = run_plain(pairs, args.time_limit)
    differ = [i for i, verdict in plain.items() if verdict != ours[i]]
    print(f"pairs={len(pairs)} time_limit_s={args.time_limit}")
    print(f"project ({lanes} math-verify lanes, batches of {args.batch}): {ours_s:.1f} s, {len(pairs) / ours_s:.0f} "
          f"pairs/s, slowest pair {slowest:.2f} s, correct {sum(ours)}")
    print(f"plain math_verify loop: {plain_s:.1f} s, {len(pairs) / plain_s:.0f} pairs/s, "
          f"{given_up} pair(s) past the limit, correct {sum(plain.values())}")
    print(f"speed-up {plain_s / ours_s:.1f}x; verdicts differing where the plain loop finished: {len(differ)}")
    for i in differ[:10]:
        print(f"  differs at {i}: gold {pairs[i][1]!r} answer {pairs[i][0].rsplit('boxed', 1)[-1][:60]!r} "
              f"project {ours[i]} plain {plain[i]}")
    print(f"command: python bench/verify.py --pairs {args.pairs} --time_limit {args.time_limit} --batch {args.batch}")


if __name__ == "__main__":
    main()
