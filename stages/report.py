"""The report: the paper's stage table (one row per model, one column group per evaluation set),
each stage's pass@1 change over the model it follows with its paired standard error, what each
training stage did (its start, data, steps, learning rate, wall time, commit) and its curves, a few
sampled completions per model, the SFT mixture's counts and the reward models' held-out accuracy,
as Markdown, JSON and one self-contained HTML page (plots embedded).

    python -m stages.report --evals base=results/tiny/eval/base cold_start_sft=results/tiny/eval/cold_start_sft \
        --trained results/tiny/cold_start_sft --mixture results/tiny/rejection_sampling \
        --output_dir results/tiny/report
    python -m stages.report --show results/tiny/report      # print the table of a finished report
"""

import argparse
import ast
import base64
import hashlib
import html
import json
import statistics
import sys
from pathlib import Path

import pyarrow.parquet as pq

from stages.lib.artifacts import METRICS, duration, read_jsonl, read_manifest, staged_output
from stages.lib.plots import curves_png
from stages.lib.recipe import compared_with, label_of
from stages.lib.rewards.registry import weighted_rewards

COLUMNS = ("pass_at_1", "cons_at_k", "format_rate", "mean_length")
NOTEWORTHY_SE = 2.0  # changes at least this many paired SEs from zero are set in bold
SAMPLES_PER_MODEL = 2  # completions shown per evaluated model
SAMPLE_CHARS = 700


def report_code_digest() -> str:
    """What the page looks like is decided by this module and the plots: docs/report.png records the
    digest of their code (syntax trees: comments and line wrapping aside) it was taken with, and a test
    fails when the code changes without a new screenshot. Imports are left out: where a name comes from does
    not change the page."""
    stages = Path(__file__).resolve().parent
    trees = ""
    for path in (stages / "report.py", stages / "lib" / "plots.py"):
        tree = ast.parse(path.read_text())
        tree.body = [node for node in tree.body if not isinstance(node, ast.Import | ast.ImportFrom)]
        trees += ast.dump(tree)
    return hashlib.sha256(trees.encode()).hexdigest()


def collect(evals: dict[str, Path]) -> dict[str, dict]:
    """stage -> eval set -> scores, from each evaluation's manifest (the proof it finished)."""
    return {stage: read_manifest(directory)["metrics"] for stage, directory in evals.items()}


def table_rows(scores: dict[str, dict]) -> tuple[list[str], list[list[str]]]:
    sets = sorted({name for per_stage in scores.values() for name in per_stage})
    header = ["model"]
    for name in sets:
        header += [f"{name} {col}" for col in COLUMNS]
    rows = []
    for stage, per_set in scores.items():
        row = [label_of(stage)]
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


def level_rows(scores: dict[str, dict]) -> tuple[list[str], list[list[str]]]:
    """Why a model's pass@1 moved: pass@1 per difficulty level, pass@k (did it solve the prompt at all)
    and accuracy among its well-formatted samples (answering better, or only formatting better), per
    evaluation set with levels."""
    levels = sorted({level for per_set in scores.values() for s in per_set.values()
                     for level in s.get("by_level", {})}, key=int)
    header = ["model", "set", "pass@k", "accuracy given format", *(f"level {level} pass@1" for level in levels)]
    rows = []
    for stage, per_set in scores.items():
        for name, s in sorted(per_set.items()):
            if not s.get("by_level"):
                continue
            pass_at_k, given_format = s.get(f"pass_at_{s['k']}"), s.get("accuracy_given_format")
            rows.append([label_of(stage), name, "–" if pass_at_k is None else f"{pass_at_k:.3f} (k={s['k']})",
                         "–" if given_format is None else f"{given_format:.3f}",
                         *(f"{s['by_level'][level]['pass_at_1']:.3f}" if level in s["by_level"] else "–"
                           for level in levels)])
    return header, rows


def change_rows(evals: dict[str, Path]) -> tuple[list[str], list[list[str]]]:
    """Each model's pass@1 against the model it follows, per evaluation set, where both are evaluated."""
    rows = []
    for stage, directory in evals.items():
        reference = compared_with(stage)
        if reference not in evals:
            continue
        for samples in sorted(directory.glob("samples_*.jsonl")):
            reference_samples = evals[reference] / samples.name
            if not reference_samples.exists():
                continue
            before, after, diff, se = paired_change(per_prompt_pass(reference_samples), per_prompt_pass(samples))
            eval_set = samples.stem.removeprefix("samples_")
            in_se = f"{diff / se:+.1f}" if se else "–"
            rows.append([f"{label_of(stage)} vs {label_of(reference)}", eval_set, f"{before:.3f}",
                         f"{after:.3f}", f"{diff:+.3f}", f"{se:.3f}" if se is not None else "–", in_se])
    return ["model vs the model it follows", "set", "pass@1 before", "after", "change", "paired SE",
            "change / SE"], rows


def built_elsewhere(directory: Path) -> bool:
    """An artifact brought with start_from may come without this pipeline's manifest."""
    return not (directory / "manifest.json").exists()


def mixture_rows(mixture_dir: Path) -> tuple[list[str], list[list[str]]]:
    """Two blocks that each add up: every sampled candidate is removed by one filter or kept, and the
    mixture is the selected reasoning rows plus the general (non-reasoning) rows, which are not sampled."""
    if built_elsewhere(mixture_dir):
        return ["", "count"], [["mixture brought by start_from (no manifest)", str(mixture_dir)]]
    metrics = read_manifest(mixture_dir)["metrics"]
    selected = metrics["selected"]
    reasoning = {domain: n for domain, n in selected.items() if domain != "general"}
    rows = [["candidates sampled from Dev2", str(metrics["candidates"])]]
    rows += [[f"  removed: {reason}", str(n)] for reason, n in sorted(metrics["removed"].items())]
    rows.append(["  kept (passed every filter)", str(metrics["kept_reasoning"])])
    rows += [[f"    selected: {domain}", str(n)] for domain, n in sorted(reasoning.items())]
    rows.append(["    not selected (domain target reached)", str(metrics["kept_reasoning"] - sum(reasoning.values()))])
    rows.append(["mixture: selected reasoning rows", str(sum(reasoning.values()))])
    rows.append(["  + general rows (non-reasoning set, not sampled)", str(selected.get("general", 0))])
    rows.append(["  = mixture total", str(metrics["total"])])
    return ["", "count"], rows


def training_data(manifest: dict) -> str:
    """What a stage trained on, in its own unit."""
    config, metrics = manifest["config"], manifest["metrics"]
    if "train_pairs" in metrics:
        return f"{metrics['train_pairs']} preference pairs"
    if "questions_per_step" in config:
        return f"{config['questions_per_step']} prompts x {config['num_generations']} samples a step"
    return f"{metrics.get('examples', '?')} conversations"


def trained_stage_rows(dirs: list[Path]) -> tuple[list[str], list[list[str]]]:
    """What each training stage did, from its manifest and metrics."""
    rows = []
    for directory in dirs:
        if built_elsewhere(directory):
            rows.append([label_of(directory.name), "brought by start_from (no manifest)"] + ["–"] * 6)
            continue
        manifest = read_manifest(directory)
        history = read_jsonl(directory / METRICS) if (directory / METRICS).exists() else []
        steps = max((row["step"] for row in history if "step" in row), default=0)
        started = label_of(Path(manifest["inputs"]["model"]["path"]).name)
        learning_rate = manifest["config"].get("learning_rate")
        runtime = manifest["metrics"].get("train_runtime_s") or manifest["wall_time_s"]
        rewards = weighted_rewards(manifest["config"].get("rewards", []), manifest["config"].get("reward_weights", []))
        rows.append([label_of(manifest["stage"]), started, training_data(manifest), rewards or "–", str(steps),
                     f"{learning_rate:.1e}" if learning_rate is not None else "–", duration(runtime),
                     manifest["code_version"]])
    return ["stage", "started from", "data", "rewards (weight)", "steps", "learning rate", "training time",
            "commit"], rows


def stage_curves(directory: Path) -> bytes | None:
    if built_elsewhere(directory) or not (directory / METRICS).exists():
        return None
    return curves_png(read_jsonl(directory / METRICS), label_of(read_manifest(directory)["stage"]))


def sample_rows(evals: dict[str, Path]) -> tuple[list[str], list[list[str]]]:
    """The first sample of the first prompts of each model's first evaluation set (the config's order),
    with the prompt text."""
    rows = []
    for stage, directory in evals.items():
        manifest = read_manifest(directory)
        sets = [name.removeprefix("eval_") for name in manifest["inputs"] if name.startswith("eval_")]
        files = [directory / f"samples_{name}.jsonl" for name in sets]  # the config's first set first
        files = [path for path in files if path.exists()]
        if not files:
            continue
        eval_set = files[0].stem.removeprefix("samples_")
        data = manifest["inputs"][f"eval_{eval_set}"]["path"]
        prompts = ({row["id"]: row["prompt"] for row in pq.read_table(data, columns=["id", "prompt"]).to_pylist()}
                   if Path(data).exists() else {})
        shown = [s for s in read_jsonl(files[0]) if s.get("sample") == 0][:SAMPLES_PER_MODEL]
        for sample in shown:
            completion = sample["completion"]
            if len(completion) > SAMPLE_CHARS:
                completion = completion[:SAMPLE_CHARS] + " …"
            rows.append([label_of(stage), eval_set, prompts.get(sample["id"], sample["id"]), completion,
                         str(sample.get("answer")), "correct" if sample["correct"] else "wrong"])
    return ["model", "set", "prompt", "completion", "final answer", "verdict"], rows


def evaluation_setting_rows(evals: dict[str, Path]) -> tuple[list[str], list[list[str]]]:
    """What makes each model's numbers comparable with another run's or a paper's, from its evaluation's
    manifest: the sampling, k and prompts of each set, the engine, the answer checker and the code."""
    rows = []
    for stage, directory in evals.items():
        manifest = read_manifest(directory)
        config, packages, metrics = manifest["config"], manifest.get("packages", {}), manifest["metrics"]
        engine = "vllm" if config.get("backend") == "vllm" else "transformers"
        sets = ", ".join(f"{name} {scores['num_prompts']} x {scores['k']}" for name, scores in metrics.items())
        rows.append([label_of(stage), sets, str(config.get("temperature")), str(config.get("top_p")),
                     str(config.get("max_new_tokens")), f"{engine} {packages.get(engine, '?')}",
                     f"math-verify {packages.get('math-verify', '?')}", manifest["code_version"]])
    return ["model", "sets: prompts x samples", "temperature", "top-p", "max new tokens", "engine", "answer check",
            "commit"], rows


HARNESS_SETTINGS = {"num_samples": "samples", "max_new_tokens": "max new tokens", "temperature": "temperature",
                    "top_p": "top-p"}


def harness_differences(config: dict, scores: dict | None, spec: dict, name: str) -> str:
    """Where this evaluation of a set differs from the harness that gave the reported figure: each setting of
    the spec's `harness` that differs here, then the spec's note for the set and for every set."""
    ours = {**config, "num_samples": (scores or {}).get("k")}  # k of this set, where it was evaluated
    differences = [f"{label} {ours[key]} (theirs {value})" for key, label in HARNESS_SETTINGS.items()
                   if (value := spec.get("harness", {}).get(key)) is not None and ours.get(key) not in (None, value)]
    notes = spec.get("notes", {})
    differences += [notes[key] for key in (name, "all") if key in notes]
    return "; ".join(differences) or "none known"


def published_rows(evals: dict[str, Path], published: dict) -> tuple[list[str], list[list[str]]]:
    """Each published model's pass@1 here beside the figure its authors report (in %, as papers give it), and
    what still differs between this evaluation and theirs."""
    rows = []
    for stage, spec in published.items():
        if stage not in evals:
            continue
        manifest = read_manifest(evals[stage])
        for name, reported in spec.get("reported", {}).items():
            ours = manifest["metrics"].get(name)
            rows.append([label_of(stage), spec["name_or_path"], name,
                         "–" if ours is None else f"{100 * ours['pass_at_1']:.1f} (k={ours['k']})",
                         f"{reported:g}", harness_differences(manifest["config"], ours, spec, name),
                         spec.get("source", "")])
    return ["model", "name", "set", "pass@1 % here", "reported pass@1 %", "differences from their evaluation",
            "source"], rows


def run_identity(evals: dict[str, Path]) -> str:
    """Run (results/<run>/eval/<model>), commit and the main package versions, from the first evaluation's
    manifest."""
    first = next(iter(evals.values()))
    manifest = read_manifest(first)
    packages = manifest.get("packages", {})
    versions = ", ".join(f"{name} {packages[name]}"
                         for name in ("torch", "transformers", "trl", "vllm") if name in packages)
    return f"run {first.parent.parent.name} · commit {manifest['code_version']} · {versions}"


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


def html_table(header, rows, strong=lambda row: False, preformatted=()) -> str:
    """`strong(row)` sets a row in bold; columns named in `preformatted` keep their line breaks."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = ""
    for row in rows:
        cells = "".join(f"<td class=\"pre\">{html.escape(c)}</td>" if header[i] in preformatted
                        else f"<td>{html.escape(c)}</td>" for i, c in enumerate(row))
        row_class = ' class="strong"' if strong(row) else ""
        body += f"<tr{row_class}>{cells}</tr>"
    return f"<table><tr>{head}</tr>{body}</table>"


def noteworthy(change_row: list[str]) -> bool:
    return change_row[-1] != "–" and abs(float(change_row[-1])) >= NOTEWORTHY_SE


def embedded_png(png: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'


def html_page(title: str, subtitle: str, sections: list[tuple[str, str, str]]) -> str:
    """sections: (heading, explanation, html body)."""
    parts = "".join(f"<h2>{html.escape(h)}</h2>" + (f"<p>{html.escape(p)}</p>" if p else "") + body
                    for h, p, body in sections)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1700px}}table{{border-collapse:collapse;margin-bottom:1em}}
td,th{{border:1px solid #999;padding:4px 8px;text-align:right}}td:first-child{{text-align:left;white-space:pre}}
td.pre{{white-space:pre-wrap;text-align:left;font-family:monospace;font-size:85%;max-width:40em}}
tr.strong td{{font-weight:bold}}.subtitle{{color:#555}}
img{{max-width:100%;border:1px solid #ddd;margin-bottom:1em}}</style>
</head><body><h1>{html.escape(title)}</h1><p class="subtitle">{html.escape(subtitle)}</p>{parts}</body></html>
"""


def show(report_dir: Path) -> None:
    print((report_dir / "table.md").read_text(), end="")
    print(f"\nreport: {(report_dir / 'report.html').resolve()}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--evals", nargs="+", default=[], metavar="NAME=DIR",
                        help="each evaluated model's evaluation directory, in table order")
    parser.add_argument("--trained", nargs="*", type=Path, default=[],
                        help="training stages' output directories, in pipeline order (what each did, its curves)")
    parser.add_argument("--mixture", type=Path, help="the rejection-sampling mixture directory")
    parser.add_argument("--reward_models", nargs="*", type=Path, default=[], help="reward model directories")
    parser.add_argument("--output_dir", type=Path)
    parser.add_argument("--published", default="{}",
                        help="JSON: each published model's evaluation name -> {name_or_path, reported: {set: pass@1 "
                             "%%}, source} (the config's evaluation.published)")
    parser.add_argument("--title", default="r1-pipeline report")
    parser.add_argument("--show", type=Path, help="print the table of an existing report and exit")
    args = parser.parse_args(argv)
    if args.show:
        show(args.show)
        return
    if not (args.evals and args.output_dir):
        parser.error("--evals and --output_dir are required (or --show)")
    malformed = [item for item in args.evals if "=" not in item]
    if malformed:
        parser.error(f"--evals takes NAME=DIR pairs, got {malformed}")
    evals = {name: Path(directory) for name, directory in (item.split("=", 1) for item in args.evals)}
    scores = collect(evals)
    header, rows = table_rows(scores)
    sections = [("Stage table", "pass@1: mean correctness over k samples per prompt (sampling: Evaluation settings); "
                 "cons@k: majority vote over the k samples; format rate: share of samples in the model's response "
                 "format; mean length in tokens.", html_table(header, rows))]
    markdown_parts = [markdown(header, rows)]
    change_header, changes = change_rows(evals)
    if changes:
        sections.append(("Changes between stages", "pass@1 of each model against the model it follows, on the "
                         "same prompts; the paired standard error is the spread of the per-prompt differences "
                         "over the square root of the number of prompts (a change of 2 SE or more, in bold, is "
                         "unlikely to be sampling noise; seed-to-seed noise of the training runs comes on top).",
                         html_table(change_header, changes, strong=noteworthy)))
        markdown_parts.append(markdown(change_header, changes))
    level_header, levels = level_rows(scores)
    if levels:
        sections.append(("Per level", "pass@1 at each difficulty level; pass@k: share of prompts with at least one "
                         "correct sample among k; accuracy given format: correctness among the samples in the "
                         "model's response format, which tells a better answer from a better format.",
                         html_table(level_header, levels)))
        markdown_parts.append(markdown(level_header, levels))
    if args.trained:
        trained_header, trained = trained_stage_rows(args.trained)
        sections.append(("What each stage did", "Each training stage's start, data, rewards (RL) with their "
                         "weights, optimizer steps, peak learning rate, training time (the Trainer's, without "
                         "loading and saving) and the commit that ran it, from its manifest.",
                         html_table(trained_header, trained)))
        markdown_parts.append(markdown(trained_header, trained))
    explanation = ("Per logging step. RL: the reward (the weighted sum of this stage's rewards, so its level differs "
                   "between stages), each reward's mean, completion length, KL and the share of groups whose rewards "
                   "all tie; final RL's general phase is shaded. "
                   "SFT and reward models: training loss and learning rate.")
    for directory in args.trained:
        png = stage_curves(directory)
        if png:
            sections.append((f"Training curves: {label_of(directory.name)}", explanation,
                             embedded_png(png, f"{directory.name} curves")))
            explanation = ""  # said once, above the first
    published = json.loads(args.published)
    if published:
        published_header, published_table = published_rows(evals, published)
        sections.append(("Published models", "Published models evaluated by the same job, beside the pass@1 their "
                         "authors report: a gap here is in the evaluation (sets, sampling, length, answer checking), "
                         "not in training.", html_table(published_header, published_table)))
        markdown_parts.append(markdown(published_header, published_table))
    settings_header, settings_rows = evaluation_setting_rows(evals)
    sections.append(("Evaluation settings", "What a number here needs to be compared with another: each set's "
                     "prompts and samples per prompt, the sampling, the engine, the answer checker's version and the "
                     "code's commit.", html_table(settings_header, settings_rows)))
    markdown_parts.append(markdown(settings_header, settings_rows))
    sample_header, samples = sample_rows(evals)
    if samples:
        sections.append(("Sampled completions", f"The first sample of the first {SAMPLES_PER_MODEL} prompts of each "
                         "model's first evaluation set, as generated (temperature 0.6).",
                         html_table(sample_header, samples, preformatted=("prompt", "completion"))))
    if args.mixture:
        mix_header, mix_rows = mixture_rows(args.mixture)
        sections.append(("SFT mixture (rejection sampling)", "Every candidate Dev2 sampled is removed by the first "
                         "filter it fails, or kept; the mixture takes each reasoning domain's target from the kept "
                         "rows and adds the general (non-reasoning) rows.", html_table(mix_header, mix_rows)))
        markdown_parts.append(markdown(mix_header, mix_rows))
    if args.reward_models:
        rm_header, rm_rows = reward_model_rows(args.reward_models)
        sections.append(("Reward models", "Share of held-out pairs whose chosen response scores higher.",
                         html_table(rm_header, rm_rows)))
        markdown_parts.append(markdown(rm_header, rm_rows))

    inputs = {stage: str(directory / "manifest.json") for stage, directory in evals.items()}
    with staged_output(args.output_dir, "report", vars(args), inputs) as (scratch, headline):
        (scratch / "scores.json").write_text(json.dumps(scores, indent=2) + "\n")
        (scratch / "table.md").write_text("\n".join(markdown_parts))
        (scratch / "report.html").write_text(html_page(args.title, run_identity(evals),
                                                       sections))
        headline["models"] = len(rows)
    show(args.output_dir)


if __name__ == "__main__":
    sys.exit(main())
