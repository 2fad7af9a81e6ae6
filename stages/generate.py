"""Samples N responses per prompt for one shard of a prompt pool (rejection sampling's generation).

    python -m stages.generate --model_path results/tiny/reasoning_rl --prompts results/tiny/data/rl_prompts.parquet \
        --shard_index 0 --num_shards 4 --work_file results/tiny/.work/generate/shard-0.jsonl \
        --output_file results/tiny/generate/shard-0.jsonl

Rows are appended to `work_file` (outside Snakemake's outputs; a progress log, stages/lib/progress.py)
a batch at a time, each line keyed by prompt id and sample index. A killed shard resumes where it stopped:
on restart, a torn last line and any prompt with fewer than N samples are dropped and regenerated, so no
sample is lost or duplicated. The finished rows are copied to `output_file`.
"""

import itertools
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from stages.lib.cli import parse_config, print_config
from stages.lib.data.schema import iter_rows
from stages.lib.generation import BackendOptions, ProgressLine, SamplingSettings, load_generator
from stages.lib.progress import ProgressLog
from stages.lib.templates import TEMPLATES, response_format
from stages.lib.training import run_fingerprint


@dataclass
class GenerateConfig(BackendOptions):
    model_path: str = field(metadata={"help": "The policy to sample from (Dev2 in the paper)."})
    prompts: str = field(metadata={"help": "Reasoning parquet file (the prompt pool)."})
    output_file: str = field(metadata={"help": "The shard's finished JSONL."})
    work_file: str = field(default="", metadata={"help": "Append-only progress file. Default: <output_file>.work"})
    shard_index: int = field(default=0)
    num_shards: int = field(default=1)
    template: str = field(default="chat", metadata={"help": f"One of {TEMPLATES}."})
    num_samples: int = field(default=4, metadata={"help": "Responses per prompt."})
    temperature: float = field(default=0.6)
    top_p: float = field(default=0.95)
    max_new_tokens: int = field(default=256)
    max_prompts: int = field(default=0, metadata={"help": "Use only the first N prompts of the pool (0: all)."})
    prompts_per_batch: int = field(default=16, metadata={"help": "Prompts per generate call; "
                                                                 "progress is saved after each."})
    seed: int = field(default=0)

    def __post_init__(self):
        self.work_file = self.work_file or f"{self.output_file}.work"
        if not 0 <= self.shard_index < self.num_shards:
            raise ValueError(f"shard_index {self.shard_index} is not in 0..{self.num_shards - 1}")


def shard_rows(rows: Iterable[dict], shard_index: int, num_shards: int) -> list[dict]:
    """Round-robin split: every prompt lands in exactly one shard."""
    return list(itertools.islice(rows, shard_index, None, num_shards))


def completed_prompts(log: ProgressLog, num_samples: int) -> set[str]:
    """Prompt ids with all their samples in the log, which keeps those and drops what follows: a prompt whose
    samples a kill cut short (a batch is written in order, so only the last prompt can be)."""
    complete, kept, current, indices = set(), 0, None, []
    for count, row in enumerate(log.replay()):
        if row["id"] != current:
            if current is not None and current not in complete:
                break  # cannot happen after a kill, which tears the end only
            current, indices = row["id"], []
        indices.append(row["sample"])
        if indices == list(range(num_samples)):
            complete.add(current)
            kept = count + 1
    log.keep(kept)
    return complete


def main(argv=None):
    config = parse_config(GenerateConfig, argv)
    print_config(config)
    # Streamed: a shard holds its own rows only (a code row's tests run to ~145 KB).
    rows = shard_rows((row for index, row in iter_rows(config.prompts, "reasoning")
                       if not config.max_prompts or index < config.max_prompts), config.shard_index, config.num_shards)
    log = ProgressLog(config.work_file, run_fingerprint(config, {"model": config.model_path,
                                                                  "prompts": config.prompts}))
    done = completed_prompts(log, config.num_samples)
    todo = [row for row in rows if row["id"] not in done]
    print(f"shard {config.shard_index}/{config.num_shards}: {len(rows)} prompts, {len(done)} already done, "
          f"{len(todo)} to generate", flush=True)

    if todo:
        generator = load_generator(config.model_path, config.backend, **config.backend_kwargs())
        tokenizer = getattr(generator, "tokenizer", None)
        fmt = response_format(config.template)
        progress = ProgressLine(f"shard {config.shard_index}/{config.num_shards}", unit="prompts")
        for start in range(0, len(todo), config.prompts_per_batch):
            batch = todo[start:start + config.prompts_per_batch]
            # A batch's seed depends on its position and the number done, so a resumed shard does not
            # replay the samples of a fresh one.
            settings = SamplingSettings(num_samples=config.num_samples, temperature=config.temperature,
                                        top_p=config.top_p, max_new_tokens=config.max_new_tokens,
                                        seed=config.seed * 1_000_003 + config.shard_index * 10_007 + len(done) + start,
                                        stop_strings=fmt.stop_strings)
            prompts = [fmt.render(row["prompt"], tokenizer, row["domain"]) for row in batch]
            samples = generator.generate(prompts, settings)
            log.append([{"id": row["id"], "sample": index, "prompt": row["prompt"], "solution": row["solution"],
                         "tests": row.get("tests") or "", "level": row["level"], "domain": row["domain"],
                         "completion": sample.text, "num_tokens": sample.num_tokens, "finished": sample.finished}
                        for row, prompt_samples in zip(batch, samples)
                        for index, sample in enumerate(prompt_samples)], sync=True)
            progress(start + len(batch), len(todo))
        if generator.overlong_prompts:
            print(f"{generator.overlong_prompts} prompts longer than the model's context got empty samples",
                  flush=True)

    Path(config.output_file).parent.mkdir(parents=True, exist_ok=True)
    log.close()
    partial = f"{config.output_file}.partial"
    log.copy_records(partial)
    os.replace(partial, config.output_file)


if __name__ == "__main__":
    main()
