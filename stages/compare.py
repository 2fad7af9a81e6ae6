"""Two runs' evaluations side by side: for each model both evaluated and each set, both runs' pass@1, the
difference and its paired standard error over the prompts both runs evaluated (the report's pairing), so that
two seeds or two variants of the recipe can be told apart from sampling noise.

    python -m stages.compare results/seed0 results/seed1          # runs: every model both evaluated
    python -m stages.compare results/a/eval/r1_zero results/b/eval/r1_zero   # two evaluations

Pairs are the same prompt in both: by id where both evaluations read the same set file (its sha256), else by
id and prompt text (read from the set files). It refuses when the evaluations' settings differ (template,
sampling, length, k, engine, answer checker: what makes pass@1 comparable), naming each setting, and when two
evaluations share no prompt. The seed and the code's commit may differ: they are what is compared.
"""

import argparse
import json
import sys
from pathlib import Path

import pyarrow.parquet as pq

from stages.lib.artifacts import read_manifest
from stages.report import markdown, paired_change, per_prompt_pass

# comparable_by keys (scores.json, stages.evaluate) that must agree for two pass@1 to be compared
SAME_SETTINGS = ("template", "temperature", "top_p", "max_new_tokens", "backend", "math_verify")


def evaluations(path: Path) -> dict[str, Path]:
    """Model -> evaluation directory: one evaluation (a folder with an evaluate manifest), or a run's
    (results/<run>, whose eval/ holds one folder per model), or an eval/ folder."""
    if (path / "manifest.json").exists() and read_manifest(path)["stage"] == "evaluate":
        return {path.name: path}
    folder = path / "eval" if (path / "eval").is_dir() else path
    found = {d.name: d for d in sorted(folder.iterdir()) if (d / "scores.json").exists()} if folder.is_dir() else {}
    if not found:
        raise SystemExit(f"compare: {path} holds no finished evaluation (a run's folder, its eval/ folder, or one "
                         "evaluation's folder with scores.json)")
    return found


def comparable_by(evaluation: Path) -> dict:
    return json.loads((evaluation / "scores.json").read_text())["comparable_by"]


def setting_differences(a: Path, b: Path) -> list[str]:
    """Each setting the two evaluations differ in, as `key: A vs B`; k per set shared by both."""
    first, second = comparable_by(a), comparable_by(b)
    differences = [f"{key}: {first.get(key)!r} vs {second.get(key)!r}" for key in SAME_SETTINGS
                   if first.get(key) != second.get(key)]
    for name in sorted(first["sets"].keys() & second["sets"].keys()):
        k_a, k_b = first["sets"][name]["samples_per_prompt"], second["sets"][name]["samples_per_prompt"]
        if k_a != k_b:
            differences.append(f"{name} samples per prompt (k): {k_a} vs {k_b}")
    return differences


def prompt_texts(evaluation: Path, eval_set: str) -> dict[str, str] | None:
    """Prompt id -> prompt text of the set file the evaluation read, or None where the file is gone."""
    data = Path(read_manifest(evaluation)["inputs"][f"eval_{eval_set}"]["path"])
    if not data.exists():
        return None
    return {row["id"]: row["prompt"] for row in pq.read_table(data, columns=["id", "prompt"]).to_pylist()}


def shared_prompts(a: Path, b: Path, eval_set: str, ids: set[str]) -> set[str]:
    """Those of `ids` (evaluated by both) that name the same prompt in both evaluations."""
    inputs_a, inputs_b = read_manifest(a)["inputs"], read_manifest(b)["inputs"]
    key = f"eval_{eval_set}"
    if inputs_a[key]["sha256"] == inputs_b[key]["sha256"]:
        return ids
    texts_a, texts_b = prompt_texts(a, eval_set), prompt_texts(b, eval_set)
    if texts_a is None or texts_b is None:
        gone = inputs_a[key]["path"] if texts_a is None else inputs_b[key]["path"]
        raise SystemExit(f"compare: the two {eval_set} sets differ (sha256) and {gone} is gone, so prompts cannot be "
                         "matched by their text")
    return {prompt for prompt in ids if texts_a.get(prompt) == texts_b.get(prompt)}


def paired_evaluations(a: dict[str, Path], b: dict[str, Path]) -> dict[str, tuple[Path, Path]]:
    """Each model both runs evaluated; two single evaluations are paired whatever their folders are called."""
    if len(a) == len(b) == 1:
        (name_a, first), (name_b, second) = *a.items(), *b.items()
        return {name_a if name_a == name_b else f"{name_a} vs {name_b}": (first, second)}
    return {model: (a[model], b[model]) for model in a if model in b}


def compare_rows(pairs: dict[str, tuple[Path, Path]]) -> tuple[list[str], list[list[str]]]:
    """One row per model and set both evaluations have; refused where their settings differ or they share no
    prompt."""
    problems = [f"{model}: {difference}" for model, (first, second) in pairs.items()
                for difference in setting_differences(first, second)]
    if problems:
        raise SystemExit("compare: the evaluations' settings differ, so their pass@1 do not compare:\n  "
                         + "\n  ".join(problems))
    rows = []
    for model, (first, second) in pairs.items():
        for samples in sorted(first.glob("samples_*.jsonl")):
            if not (second / samples.name).exists():
                continue
            eval_set = samples.stem.removeprefix("samples_")
            scores_a, scores_b = per_prompt_pass(samples), per_prompt_pass(second / samples.name)
            shared = shared_prompts(first, second, eval_set, scores_a.keys() & scores_b.keys())
            if not shared:
                raise SystemExit(f"compare: {model} {eval_set}: the two evaluations share no prompt")
            paired = ({prompt: scores[prompt] for prompt in shared} for scores in (scores_a, scores_b))
            mean_a, mean_b, diff, se = paired_change(*paired)
            rows.append([model, eval_set, f"{mean_a:.3f}", f"{mean_b:.3f}", f"{diff:+.3f}",
                         "–" if se is None else f"{se:.3f}", f"{diff / se:+.1f}" if se else "–", str(len(shared))])
    return ["model", "set", "A pass@1", "B pass@1", "B - A", "paired SE", "(B - A) / SE", "shared prompts"], rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a", type=Path, help="run A: results/<run>, its eval/ folder, or one evaluation's folder")
    parser.add_argument("b", type=Path, help="run B, the same way")
    args = parser.parse_args(argv)
    a, b = evaluations(args.a), evaluations(args.b)
    pairs = paired_evaluations(a, b)
    if not pairs:
        raise SystemExit(f"compare: the runs evaluated no model in common (A: {', '.join(a)}; B: {', '.join(b)})")
    header, rows = compare_rows(pairs)
    for name, path, found in (("A", args.a, a), ("B", args.b, b)):
        settings = comparable_by(next(iter(found.values())))
        print(f"{name}: {path} (commit {settings.get('code_version')}, seed {settings.get('seed')})")
    print("pass@1 over the prompts both evaluated; the paired SE is the spread of the per-prompt differences over "
          "the square root of their number (|B - A| of 2 SE or more is unlikely to be sampling noise)\n")
    print(markdown(header, rows), end="")
    alone = [] if len(a) == len(b) == 1 else sorted(a.keys() ^ b.keys())
    if alone:
        print(f"evaluated by one run only, not compared: {', '.join(alone)}")


if __name__ == "__main__":
    sys.exit(main())
