"""The report: the paper's stage table (one row per model, one column group per evaluation set),
as Markdown, JSON and a self-contained HTML page.

    python -m stages.report --eval_root results/tiny/eval --stages base cold_start_sft --output_dir results/tiny/report
    python -m stages.report --show results/tiny/report      # print the table of a finished report
"""

import argparse
import html
import json
import sys
from pathlib import Path

from stages.artifacts import read_manifest, staged_output

STAGE_NAMES = {  # the paper's names for each stage's model
    "base": "Base", "r1_zero": "R1-Zero", "cold_start_sft": "Dev1 (cold-start SFT)",
    "reasoning_rl": "Dev2 (reasoning RL)", "mixture_sft": "Dev3 (SFT on the mixture)", "final_rl": "R1",
}
COLUMNS = ("pass_at_1", "cons_at_k", "format_rate", "mean_length")


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


def markdown(header, rows) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def html_page(header, rows, title: str) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #999;padding:4px 8px;text-align:right}}td:first-child{{text-align:left}}</style>
</head><body><h1>{html.escape(title)}</h1>
<p>pass@1: mean correctness over k samples per prompt; cons@k: majority vote over the k samples;
format rate: share of samples in the model's response format; mean length in tokens.</p>
<table><tr>{head}</tr>{body}</table></body></html>
"""


def show(report_dir: Path) -> None:
    print((report_dir / "table.md").read_text(), end="")
    print(f"\nreport: {(report_dir / 'report.html').resolve()}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--eval_root", type=Path)
    parser.add_argument("--stages", nargs="+")
    parser.add_argument("--output_dir", type=Path)
    parser.add_argument("--title", default="r1-pipeline: stage table")
    parser.add_argument("--show", type=Path, help="print the table of an existing report and exit")
    args = parser.parse_args(argv)
    if args.show:
        show(args.show)
        return
    if not (args.eval_root and args.stages and args.output_dir):
        parser.error("--eval_root, --stages and --output_dir are required (or --show)")
    scores = collect(args.eval_root, args.stages)
    header, rows = table_rows(scores)
    inputs = {stage: str(args.eval_root / stage / "manifest.json") for stage in args.stages}
    with staged_output(args.output_dir, "report", vars(args), inputs) as (scratch, headline):
        (scratch / "scores.json").write_text(json.dumps(scores, indent=2) + "\n")
        (scratch / "table.md").write_text(markdown(header, rows))
        (scratch / "report.html").write_text(html_page(header, rows, args.title))
        headline["models"] = len(rows)
    show(args.output_dir)


if __name__ == "__main__":
    sys.exit(main())
