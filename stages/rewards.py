"""Scores a JSONL file of completions with any rewards.

    python -m stages.rewards score --rewards accuracy,format --input in.jsonl --output out.jsonl
    python -m stages.rewards score --rewards format,my_rewards.py:cites_step --input in.jsonl --output out.jsonl

Each input row needs `prompt`, `completion` and `solution` (math) or `tests` (code: a list of
{input, output} or {assert} cases); each output row is the input row plus `scores` (one value per
reward, by its name, a reward of your own by its function's; null where a reward does not apply). A bad
row (not JSON, not an object, a missing field, malformed test cases) is reported on stderr with its line
number and left out; the others are still scored, and the exit status is 1.
"""

import argparse
import json
import sys

from stages.lib.rewards.external import ExternalReward, reference_problem
from stages.lib.rewards.functions import RewardSettings, build_reward_functions
from stages.lib.rewards.registry import RULE_REWARDS, is_reference
from stages.lib.templates import TEMPLATES

REQUIRED_FIELDS = ("prompt", "completion")
ANSWER_FIELDS = ("solution", "tests")  # math rows have a solution, code rows their test cases


def read_rows(path: str):
    """Yields (line number, row or None, problem or None)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                yield number, None, f"not JSON ({error.msg})"
                continue
            if not isinstance(row, dict):
                yield number, None, "not a JSON object"
                continue
            missing = [field for field in REQUIRED_FIELDS if field not in row]
            if not any(field in row for field in ANSWER_FIELDS):
                missing.append(" or ".join(ANSWER_FIELDS))
            if missing:
                yield number, None, f"missing field(s) {missing}"
            elif not isinstance(row["completion"], str):
                yield number, None, "field 'completion' is not a string"
            else:
                yield number, row, None


def reward_functions(names: list[str], settings: RewardSettings) -> list:
    """The registry's rule rewards and the user's own (`file.py:function`, `module:function`), in the given order."""
    problems = [f"{name}: {problem}" for name in names if is_reference(name) and (problem := reference_problem(name))]
    if problems:
        raise ValueError("; ".join(problems))
    built = iter(build_reward_functions([name for name in names if not is_reference(name)], settings))
    return [ExternalReward(name) if is_reference(name) else next(built) for name in names]


def score_file(input_path: str, output_path: str, names: list[str], settings: RewardSettings) -> int:
    functions = reward_functions(names, settings)
    bad = scored = 0
    with open(output_path, "w", encoding="utf-8") as out:
        for number, row, problem in read_rows(input_path):
            if problem:
                bad += 1
                print(f"{input_path}:{number}: {problem}", file=sys.stderr)
                continue
            num_tokens = row.get("num_tokens", len(row["completion"].split()))
            try:
                row["scores"] = {f.__name__: f.score(row["completion"], num_tokens, row) for f in functions}
            except ValueError as error:  # e.g. malformed test cases
                bad += 1
                print(f"{input_path}:{number}: {error}", file=sys.stderr)
                continue
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
            scored += 1
    print(f"scored {scored} row(s), skipped {bad} bad row(s) -> {output_path}", file=sys.stderr)
    return 1 if bad else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stages.rewards", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    score = commands.add_parser("score", help="score a JSONL file")
    score.add_argument("--rewards", required=True, help=f"comma-separated, from {sorted(RULE_REWARDS)} or your own "
                       "(path/to/file.py:function, module:function)")
    score.add_argument("--input", required=True)
    score.add_argument("--output", required=True)
    score.add_argument("--template", default="chat", choices=TEMPLATES)
    score.add_argument("--language", default="en")
    score.add_argument("--max_completion_length", type=int, default=256,
                       help="overlong punishment; lengths come from a row's num_tokens (else words)")
    score.add_argument("--overlong_buffer", type=int, default=64)
    score.add_argument("--verify_timeout_s", type=float, default=5.0)
    args = parser.parse_args(argv)
    settings = RewardSettings(template=args.template, language=args.language,
                              max_completion_length=args.max_completion_length,
                              overlong_buffer=args.overlong_buffer, verify_timeout_s=args.verify_timeout_s)
    names = [name.strip() for name in args.rewards.split(",") if name.strip()]
    try:
        return score_file(args.input, args.output, names, settings)
    except ValueError as error:
        parser.error(str(error))


if __name__ == "__main__":
    sys.exit(main())
