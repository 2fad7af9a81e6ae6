"""The report: the paper's stage table (one row per model, one column group per evaluation set),
each stage's pass@1 change over the model it follows with its paired standard error, the RL
stages' training curves, the SFT mixture's counts and the reward models' held-out accuracy,
as Markdown, JSON and one self-contained HTML page (plots embedded).

    python -m stages.report --eval_root results/tiny/eval --stages base cold_start_sft \
        --rl_stages results/tiny/r1_zero --mixture results/tiny/mixture --output_dir results/tiny/report
    python -m stages.report --show results/tiny/report      # print the table of a finished report
"""

import argparse
import base64
import html
import json
import statistics
import sys
from pathlib import Path

from stages.artifacts import read_manifest, staged_output

STAGE_NAMES = {  # the paper's names for each stage's model
    "base": "Base", "r1_zero": "R1-Zero", "cold_start_sft": "Dev1 (cold-start SFT)",
    "reasoning_rl": "Dev2 (reasoning RL)", "mixture_sft": "Dev3 (SFT on the mixture)", "final_rl": "R1",
}
COLUMNS = ("pass_at_1", "cons_at_k", "format_rate", "mean_length")
# The comparison the paper draws for each model: the model it was trained from, or (Dev3, the
# distilled students) the one whose samples it learned from.
COMPARED_WITH = {"r1_zero": "base", "cold_start_sft": "base", "reasoning_rl": "cold_start_sft",
                 "mixture_sft": "reasoning_rl", "final_rl": "mixture_sft"}
CURVES = "training_curves.png"


def display_name(stage: str) -> str:
    if stage.startswith("distill_"):
        return f"Distilled {stage.removeprefix('distill_')}"
    return STAGE_NAMES.get(stage, stage)


def collect(eval_root: Path, stages: list[str]) -> dict[str, dict]:
    """stage -> eval set -> scores, from each evaluation's manifest (the proof it finished)."""
    return {stage: read_manifest(eval_root / stage)["metrics"] for stage in stages}


def table_rows(scores: dict[str, dict]) -> tuple[list[str], list[list[str]]]:
    sets = sorted({name for per_stage in scores.values() for name in per_stage})
    header = ["model"]
    for name in sets:
        header += [f"{name} {col}" for col in COLUMNS]
    rows = []
    for stage, per_set in scores.items():
        row = [display_name(stage)]
        for name in sets:
            s = per_set.get(name)
            if s is None:
                row += ["–"] * len(COLUMNS)
                continue
            k = s["k"]
            row += [f"{s['pass_at_1']:.3f}", f"{s[f'cons_at_{k}']:.3f} (k={k})", f"{s['format_rate']:.3f}",
                    f"{s['mean_length']:.1f}"]
        rows.append(row)
    return header, rows


def compared_with(stage: str) -> str | None:
    return "final_rl" if stage.startswith("distill_") else COMPARED_WITH.get(stage)


def per_prompt_pass(samples: Path) -> dict[str, float]:
    """Prompt id -> mean correctness over its k samples (the evaluation's samples file)."""
    correct: dict[str, list[bool]] = {}
    for line in samples.read_text().splitlines():
        row = json.loads(line)
        correct.setdefault(row["id"], []).append(bool(row["correct"]))
    return {prompt: sum(c) / len(c) for prompt, c in correct.items()}


def paired_change(before: dict[str, float], after: dict[str, float]) -> tuple[float, float, float, float | None]:
    """Mean pass@1 before and after, their difference and its standard error over the prompts both
    evaluated: pairing by prompt removes the prompts' own difficulty from the noise."""
    prompts = sorted(before.keys() & after.keys())
    if not prompts:
        raise ValueError("the two evaluations share no prompt")
    diffs = [after[p] - before[p] for p in prompts]
    se = statistics.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else None
    return (statistics.mean(before[p] for p in prompts), statistics.mean(after[p] for p in prompts),
            statistics.mean(diffs), se)


def change_rows(eval_root: Path, stages: list[str]) -> tuple[list[str], list[list[str]]]:
    """Each model's pass@1 against the model it follows, per evaluation set, where both are evaluated."""
    rows = []
    for stage in stages:
        reference = compared_with(stage)
        if reference not in stages:
            continue
        for samples in sorted((eval_root / stage).glob("samples_*.jsonl")):
            reference_samples = eval_root / reference / samples.name
            if not reference_samples.exists():
                continue
            before, after, diff, se = paired_change(per_prompt_pass(reference_samples), per_prompt_pass(samples))
            eval_set = samples.stem.removeprefix("samples_")
            in_se = f"{diff / se:+.1f}" if se else "–"
            rows.append([f"{display_name(stage)} vs {display_name(reference)}", eval_set, f"{before:.3f}",
                         f"{after:.3f}", f"{diff:+.3f}", f"{se:.3f}" if se is not None else "–", in_se])
    return ["model vs the model it follows", "set", "pass@1 before", "after", "change", "paired SE",
            "change / SE"], rows


def built_elsewhere(directory: Path) -> bool:
    """An artifact brought with start_from may come without this pipeline's manifest."""
    return not (directory / "manifest.json").exists()


def mixture_rows(mixture_dir: Path) -> tuple[list[str], list[list[str]]]:
    if built_elsewhere(mixture_dir):
        return ["", "count"], [["mixture brought by start_from (no manifest)", str(mixture_dir)]]
    metrics = read_manifest(mixture_dir)["metrics"]
    rows = [["candidates sampled", str(metrics["candidates"])]]
    rows += [[f"removed: {reason}", str(n)] for reason, n in sorted(metrics["removed"].items())]
    rows += [[f"selected: {domain}", str(n)] for domain, n in sorted(metrics["selected"].items())]
    rows.append(["mixture total", str(metrics["total"])])
    return ["", "count"], rows


def reward_model_rows(dirs: list[Path]) -> tuple[list[str], list[list[str]]]:
    rows = []
    for directory in dirs:
        if built_elsewhere(directory):
            rows.append([directory.name, "brought by start_from (no manifest)", "–", "–"])
            continue
        m = read_manifest(directory)["metrics"]
        before = m["held_out_pairwise_accuracy_before"]  # None: a ZeRO-3 model is partitioned before training
        rows.append([m["kind"], str(m["held_out_pairs"]), "–" if before is None else f"{before:.3f}",
                     f"{m['held_out_pairwise_accuracy']:.3f}"])
    return ["reward model", "held-out pairs", "pairwise accuracy before training", "after"], rows


def markdown(header, rows) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def html_table(header, rows) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def embedded_png(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{html.escape(path.parent.name)} training curves" src="data:image/png;base64,{data}">'


def html_page(title: str, sections: list[tuple[str, str, str]]) -> str:
    """sections: (heading, explanation, html body)."""
    parts = "".join(f"<h2>{html.escape(h)}</h2><p>{html.escape(p)}</p>{body}" for h, p, body in sections)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1700px}}table{{border-collapse:collapse;margin-bottom:1em}}
td,th{{border:1px solid #999;padding:4px 8px;text-align:right}}td:first-child{{text-align:left}}
img{{max-width:100%;border:1px solid #ddd;margin-bottom:1em}}</style>
</head><body><h1>{html.escape(title)}</h1>{parts}</body></html>
"""


def show(report_dir: Path) -> None:
    print((report_dir / "table.md").read_text(), end="")
    print(f"\nreport: {(report_dir / 'report.html').resolve()}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--eval_root", type=Path)
    parser.add_argument("--stages", nargs="+", help="evaluated models, in table order")
    parser.add_argument("--rl_stages", nargs="*", type=Path, default=[], help="RL stage directories (curves)")
    parser.add_argument("--mixture", type=Path, help="the rejection-sampling mixture directory")
    parser.add_argument("--reward_models", nargs="*", type=Path, default=[], help="reward model directories")
    parser.add_argument("--output_dir", type=Path)
    parser.add_argument("--title", default="r1-pipeline report")
    parser.add_argument("--show", type=Path, help="print the table of an existing report and exit")
    args = parser.parse_args(argv)
    if args.show:
        show(args.show)
        return
    if not (args.eval_root and args.stages and args.output_dir):
        parser.error("--eval_root, --stages and --output_dir are required (or --show)")
    scores = collect(args.eval_root, args.stages)
    header, rows = table_rows(scores)
    sections = [("Stage table", "pass@1: mean correctness over k samples per prompt (temperature 0.6, top-p 0.95); "
                 "cons@k: majority vote over the k samples; format rate: share of samples in the model's response "
                 "format; mean length in tokens.", html_table(header, rows))]
    markdown_parts = [markdown(header, rows)]
    change_header, changes = change_rows(args.eval_root, args.stages)
    if changes:
        sections.append(("Changes between stages", "pass@1 of each model against the model it follows, on the "
                         "same prompts; the paired standard error is the spread of the per-prompt differences "
                         "over the square root of the number of prompts (a change of 2 SE or more is unlikely "
                         "to be sampling noise; seed-to-seed noise of the training runs comes on top).",
                         html_table(change_header, changes)))
        markdown_parts.append(markdown(change_header, changes))
    for stage_dir in args.rl_stages:
        if (stage_dir / CURVES).exists():
            sections.append((f"Training curves: {display_name(stage_dir.name)}",
                             "Per logging step: reward, each reward's mean, mean completion length, KL, share of "
                             "groups whose rewards all tie.", embedded_png(stage_dir / CURVES)))
    if args.mixture:
        mix_header, mix_rows = mixture_rows(args.mixture)
        sections.append(("SFT mixture (rejection sampling)", "Every candidate is either removed by one filter or "
                         "kept; the mixture fills each domain's target.", html_table(mix_header, mix_rows)))
        markdown_parts.append(markdown(mix_header, mix_rows))
    if args.reward_models:
        rm_header, rm_rows = reward_model_rows(args.reward_models)
        sections.append(("Reward models", "Share of held-out pairs whose chosen response scores higher.",
                         html_table(rm_header, rm_rows)))
        markdown_parts.append(markdown(rm_header, rm_rows))

    inputs = {stage: str(args.eval_root / stage / "manifest.json") for stage in args.stages}
    with staged_output(args.output_dir, "report", vars(args), inputs) as (scratch, headline):
        (scratch / "scores.json").write_text(json.dumps(scores, indent=2) + "\n")
        (scratch / "table.md").write_text("\n".join(markdown_parts))
        (scratch / "report.html").write_text(html_page(args.title, sections))
        headline["models"] = len(rows)
    show(args.output_dir)


if __name__ == "__main__":
    sys.exit(main())
