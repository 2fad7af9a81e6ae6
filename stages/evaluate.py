"""Evaluates one model on reasoning sets: k samples per prompt, pass@1, cons@k, format rate, length.

    python -m stages.evaluate --model_path results/tiny/cold_start_sft --template chat \
        --eval_sets math=results/tiny/data/eval_math.parquet --output_dir results/tiny/eval/cold_start_sft

pass@1 is the mean correctness over the k samples of each prompt, averaged over prompts (the paper's
definition, temperature 0.6, top-p 0.95); cons@k is the correctness of the majority answer. scores.json
holds, beside the scores, what makes them comparable with another run's or a paper's: the code's
commit, the verifier's and the engine's versions, the sampling settings, k and the prompts of each set.
"""

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from stages.lib.artifacts import code_version, package_versions, staged_output, write_jsonl
from stages.lib.cli import parse_config, print_config
from stages.lib.data.schema import read_table
from stages.lib.generation import BackendOptions, ProgressLine, SamplingSettings, load_generator
from stages.lib.rewards.code import is_code_row
from stages.lib.rewards.grading import Grader, gold_problem
from stages.lib.rewards.verify import as_number, normalize, verify_lanes
from stages.lib.templates import TEMPLATES, response_format


@dataclass
class EvaluateConfig(BackendOptions):
    model_path: str = field(metadata={"help": "Model directory or hub id."})
    output_dir: str = field(metadata={"help": "Where scores.json, samples and the manifest go."})
    eval_sets: list[str] = field(metadata={"help": "NAME=PATH of reasoning parquet files."})
    template: str = field(default="chat", metadata={"help": f"Prompt template, one of {TEMPLATES}."})
    num_samples: int = field(default=16, metadata={"help": "k: samples per prompt (paper: 64 AIME, 16 MATH-500)."})
    samples_per_set: str = field(default="{}", metadata={
        "help": 'k for some sets, over num_samples, as JSON: {"aime24": 64} (small sets need more samples for a '
                "pass@1 that holds still)."})
    temperature: float = field(default=0.6)
    top_p: float = field(default=0.95)
    max_new_tokens: int = field(default=256, metadata={"help": "Paper: 32,768."})
    seed: int = field(default=0)
    verify_timeout_s: float = field(default=5.0, metadata={"help": "Hard limit per symbolic answer check."})
    max_prompts: int = field(default=0, metadata={"help": "Evaluate only the first N prompts of each set (0: all)."})


class IncompleteSamplesError(RuntimeError):
    """Fewer samples than k for some prompt: scoring it would silently under-report."""


def check_complete(samples_per_prompt: list[list], k: int, prompt_ids: list[str]) -> None:
    short = [(pid, len(s)) for pid, s in zip(prompt_ids, samples_per_prompt) if len(s) < k]
    if short:
        shown = ", ".join(f"{pid} ({n}/{k})" for pid, n in short[:5])
        raise IncompleteSamplesError(f"{len(short)} prompt(s) got fewer than k={k} samples: {shown}")


def pass_at_1(correct: list[list[bool]]) -> float:
    if not correct:
        raise ValueError("no prompts to score")
    return sum(sum(c) / len(c) for c in correct) / len(correct)


def vote_key(answer: str | None):
    """Answers vote by value when they are numbers ("5", "5.0", "05" agree), else by normalised text."""
    if answer is None:
        return None
    text = normalize(answer)
    number = as_number(text)
    return number if number is not None else text


def majority_answer(answers: list[str | None]) -> int | None:
    """Index of a sample carrying the most frequent answer (first seen wins ties); None if no answer."""
    keys = [vote_key(a) for a in answers]
    counts = Counter(k for k in keys if k is not None)
    if not counts:
        return None
    best = max(counts.values())
    return next(i for i, key in enumerate(keys) if key is not None and counts[key] == best)


def cons_at_k(answers: list[list[str | None]], correct: list[list[bool]]) -> float:
    votes = []
    for prompt_answers, prompt_correct in zip(answers, correct):
        index = majority_answer(prompt_answers)
        votes.append(index is not None and prompt_correct[index])
    return sum(votes) / len(votes)


def score_set(rows, samples, k: int, grader: Grader):
    check_complete(samples, k, [r["id"] for r in rows])
    answers = [[grader.answer(s.text, row) for s in prompt_samples[:k]] for row, prompt_samples in zip(rows, samples)]
    verdicts = iter(grader.grade_many([a for prompt_answers in answers for a in prompt_answers],
                                      [row for row, prompt_answers in zip(rows, answers) for _ in prompt_answers]))
    correct = [[next(verdicts) for _ in prompt_answers] for prompt_answers in answers]
    formatted = [[grader.format.is_well_formatted(s.text) for s in prompt_samples[:k]] for prompt_samples in samples]
    lengths = [s.num_tokens for prompt_samples in samples for s in prompt_samples[:k]]
    pairs = [(c, f) for prompt_correct, prompt_formatted in zip(correct, formatted)
             for c, f in zip(prompt_correct, prompt_formatted)]
    well_formed = [c for c, f in pairs if f]
    levels = sorted({row["level"] for row in rows if row.get("level") is not None})
    scores = {
        "pass_at_1": pass_at_1(correct),
        f"cons_at_{k}": cons_at_k(answers, correct),
        f"pass_at_{k}": sum(any(c) for c in correct) / len(correct),
        "format_rate": pass_at_1(formatted),
        # Whether a model got better at answering or only at the format: correctness among the samples
        # in the response format (None when none is).
        "accuracy_given_format": sum(well_formed) / len(well_formed) if well_formed else None,
        "by_level": {str(level): {"num_prompts": len(at_level), "pass_at_1": pass_at_1(at_level)}
                     for level in levels
                     for at_level in [[c for row, c in zip(rows, correct) if row.get("level") == level]]},
        "mean_length": sum(lengths) / len(lengths),
        "truncated_rate": sum(not s.finished for p in samples for s in p[:k]) / len(lengths),
        "num_prompts": len(rows),
        "k": k,
    }
    records = [{"id": row["id"], "level": row.get("level"), "solution": row["solution"], "sample": i,
                "completion": s.text, "answer": a, "correct": c, "formatted": f, "num_tokens": s.num_tokens}
               for row, ps, pa, pc, pf in zip(rows, samples, answers, correct, formatted)
               for i, (s, a, c, f) in enumerate(zip(ps, pa, pc, pf))]
    return scores, records


def checked_rows(name: str, path: str, max_prompts: int) -> list[dict]:
    """An evaluation set's rows (the first `max_prompts`), each one gradable; read before anything is sampled."""
    rows = read_table(path, "reasoning").to_pylist()
    if max_prompts:
        rows = rows[:max_prompts]
    if not rows:
        raise ValueError(f"evaluation set {name} ({path}) has no rows")
    problems = [(i, problem) for i, r in enumerate(rows) if (problem := gold_problem(r))]
    if problems:  # an unanswerable row would silently count as wrong
        raise ValueError(f"evaluation set {name} ({path}): "
                         + "; ".join(f"row {i}: {problem}" for i, problem in problems[:10]))
    return rows


def samples_of_set(config: EvaluateConfig, names) -> dict[str, int]:
    """k of each set: num_samples, or the set's own from samples_per_set (an unknown set name is a mistake)."""
    own = json.loads(config.samples_per_set)
    unknown = sorted(set(own) - set(names))
    if unknown:
        raise ValueError(f"--samples_per_set names {unknown}, which --eval_sets lacks ({sorted(names)})")
    return {name: int(own.get(name, config.num_samples)) for name in names}


def comparable_by(config: EvaluateConfig, rows_of_set: dict[str, list], samples: dict[str, int]) -> dict:
    """What a reader needs to compare these scores with another run's or a paper's."""
    packages = package_versions()
    return {
        "model": config.model_path, "template": config.template, "code_version": code_version(),
        "math_verify": packages.get("math-verify"), "backend": config.backend,
        "engine": packages.get("vllm") if config.backend == "vllm" else packages.get("transformers"),
        "temperature": config.temperature, "top_p": config.top_p, "max_new_tokens": config.max_new_tokens,
        "seed": config.seed, "sets": {name: {"prompts": len(rows), "samples_per_prompt": samples[name]}
                                      for name, rows in rows_of_set.items()},
    }


def main(argv=None):
    config = parse_config(EvaluateConfig, argv)
    print_config(config)
    malformed = [item for item in config.eval_sets if "=" not in item]
    if malformed:
        raise ValueError(f"--eval_sets items must be NAME=PATH, got {malformed}")
    eval_sets = dict(item.split("=", 1) for item in config.eval_sets)
    samples_per_set = samples_of_set(config, eval_sets)
    rows_of_set = {name: checked_rows(name, path, config.max_prompts) for name, path in eval_sets.items()}
    grader = Grader(config.template, config.verify_timeout_s, lanes=verify_lanes(), code_workers=verify_lanes())
    if any(is_code_row(row) for rows in rows_of_set.values() for row in rows):
        grader.start_sandbox()  # before sampling: a refused sandbox would lose every set sampled before `code`
    generator = load_generator(config.model_path, config.backend, **config.backend_kwargs())
    inputs = {"model": config.model_path, **{f"eval_{n}": p for n, p in eval_sets.items()}}
    if not Path(config.model_path).exists():
        inputs.pop("model")  # a hub id: nothing local to hash
    with staged_output(config.output_dir, "evaluate", config, inputs) as (scratch, headline):
        for name, rows in rows_of_set.items():
            timeouts_before = grader.verifier.timeouts
            tokenizer = getattr(generator, "tokenizer", None)
            prompts = [grader.format.render(r["prompt"], tokenizer, r["domain"]) for r in rows]
            overlong_before = generator.overlong_prompts
            settings = SamplingSettings(num_samples=samples_per_set[name], temperature=config.temperature,
                                        top_p=config.top_p, max_new_tokens=config.max_new_tokens, seed=config.seed,
                                        stop_strings=response_format(config.template).stop_strings)
            samples = generator.generate(prompts, settings, on_progress=ProgressLine(name))
            scores, records = score_set(rows, samples, samples_per_set[name], grader)
            scores["verify_timeouts"] = grader.verifier.timeouts - timeouts_before
            scores["overlong_prompts"] = generator.overlong_prompts - overlong_before  # scored as wrong
            headline[name] = scores
            write_jsonl(scratch / f"samples_{name}.jsonl", records)
            print(f"{name}: " + json.dumps(scores), flush=True)
        scores_file = {"comparable_by": comparable_by(config, rows_of_set, samples_per_set), "sets": headline}
        (scratch / "scores.json").write_text(json.dumps(scores_file, indent=2) + "\n")
    grader.close()


if __name__ == "__main__":
    main()
