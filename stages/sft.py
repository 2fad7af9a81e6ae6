"""Supervised fine-tuning on conversations with TRL's SFTTrainer: cold-start SFT (Dev1), the second
SFT on the rejection-sampled mixture (Dev3), and distillation into small models.

    python -m stages.sft --model_path results/tiny/base --train_data results/tiny/data/cold_start.parquet \
        --output_dir results/tiny/cold_start_sft

Each conversation becomes a prompt (every message before the last) and a completion (the last,
assistant message), so the loss falls on the assistant's answer only, whatever the tokenizer's chat
template looks like.
"""

from datasets import Dataset
from transformers import AutoModelForCausalLM, set_seed
from trl import SFTConfig, SFTTrainer

from stages.lib.artifacts import staged_output
from stages.lib.chat_template import load_tokenizer
from stages.lib.cli import parse_config, print_config
from stages.lib.configs import SFTStageConfig
from stages.lib.data.schema import read_table
from stages.lib.training import (
    StopOnSignal,
    WallTimeInCheckpoints,
    claim_work_dir,
    log_progress,
    refuse_data_parallel,
    resume_checkpoint,
    run_fingerprint,
    save_model_for_publication,
    workflow_trainer_defaults,
    write_training_metrics,
)


def to_prompt_completion(rows: list[dict], source: str) -> list[dict]:
    """Splits each conversation before its last (assistant) message; a malformed row is named."""
    examples = []
    for index, row in enumerate(rows):
        messages = row.get("messages") or []
        if len(messages) < 2 or messages[-1].get("role") != "assistant" or not messages[-1].get("content"):
            raise ValueError(f"{source}: row {index} (id {row.get('id')!r}) does not end with a non-empty "
                             "assistant message")
        examples.append({"prompt": messages[:-1], "completion": messages[-1:]})
    return examples


def load_conversations(paths: list[str]) -> Dataset:
    examples = []
    for path in paths:
        examples += to_prompt_completion(read_table(path, "sft").to_pylist(), path)
    if not examples:  # e.g. a cold start from R1-Zero's samples when R1-Zero solved none
        raise ValueError(f"{', '.join(paths)}: no examples to train on")
    return Dataset.from_list(examples)


def within_length(dataset: Dataset, tokenizer, max_length: int) -> tuple[Dataset, int]:
    """The examples whose whole conversation fits in `max_length` tokens, and how many did not: TRL would
    cut a longer one, and the model would learn a reasoning block that never closes (no </think>, no
    summary, no end of turn)."""
    def fits(batch):
        texts = [tokenizer.apply_chat_template(p + c, tokenize=False) for p, c in zip(batch["prompt"],
                                                                                  batch["completion"])]
        return [len(ids) <= max_length for ids in tokenizer(texts, add_special_tokens=False).input_ids]

    kept = dataset.filter(fits, batched=True, batch_size=256)
    return kept, len(dataset) - len(kept)


def select_examples(dataset: Dataset, tokenizer, config: SFTStageConfig) -> tuple[Dataset, dict]:
    """The first `max_examples` examples that fit `max_length` (all that fit when 0), and the counts for the
    manifest. Fails, before any model is loaded, when more than `max_dropped_share` of those asked for are
    missing: a cold start silently trained on a remnant would carry into every later stage."""
    fitting, too_long = within_length(dataset, tokenizer, config.max_length)
    wanted = config.max_examples or len(dataset)
    selected = fitting.select(range(min(wanted, len(fitting))))
    counts = {"examples": len(selected), "examples_read": len(dataset), "examples_over_max_length": too_long}
    if len(selected) < wanted * (1 - config.max_dropped_share) or not len(selected):
        raise ValueError(
            f"{', '.join(config.train_data)}: {len(fitting)} of {len(dataset)} examples fit max_length="
            f"{config.max_length} tokens ({too_long} are longer), short of the {wanted} asked for "
            f"({'max_examples' if config.max_examples else 'every example'}; max_dropped_share="
            f"{config.max_dropped_share}). Read more examples (a larger pool: the data set's max_rows), raise "
            "max_length (with extend_context_to past the model's context), or accept fewer with max_dropped_share")
    if too_long:
        print(f"{too_long} of {len(dataset)} examples are longer than max_length={config.max_length} tokens: left "
              f"out, not cut; training on {len(selected)}", flush=True)
    return selected, counts


def trainer_arguments(config: SFTStageConfig) -> SFTConfig:
    """TRL's SFTConfig: the stage's keys by name, the translated ones below, then `trainer_args`."""
    translated = {
        "lr_scheduler_kwargs": {"min_lr_rate": config.min_lr_rate} if "min_lr" in config.lr_scheduler_type else None,
        "warmup_steps": config.warmup_ratio,  # a float below 1 is a ratio
    }
    return SFTConfig(**config.trainer_kwargs(workflow_trainer_defaults(), translated))


def main(argv=None):
    config = parse_config(SFTStageConfig, argv)
    print_config(config)
    refuse_data_parallel()
    set_seed(config.seed)
    inputs = {"model": config.model_path, **{f"train_data_{i}": p for i, p in enumerate(config.train_data)}}
    claim_work_dir(config.work_dir, run_fingerprint(config, inputs))
    tokenizer = load_tokenizer(config.model_path, config.chat_template)
    dataset, counts = select_examples(load_conversations(config.train_data), tokenizer, config)
    args = trainer_arguments(config)
    # After the arguments: a ZeRO-3 config registered by them makes DeepSpeed partition while loading.
    context = {"max_position_embeddings": config.extend_context_to} if config.extend_context_to else {}
    model = AutoModelForCausalLM.from_pretrained(config.model_path, **config.model_kwargs(config.deepspeed),
                                                 **context)
    if context:
        tokenizer.model_max_length = config.extend_context_to
    stop, timing = StopOnSignal(), WallTimeInCheckpoints()
    trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
                         callbacks=[stop, timing])
    log_progress(trainer)
    result = trainer.train(resume_from_checkpoint=resume_checkpoint(config.work_dir))
    stop.exit_unless_done(trainer)

    if not save_model_for_publication(trainer, tokenizer, config.output_dir):
        return  # another process of a multi-GPU run: the main one publishes
    with staged_output(config.output_dir, config.stage, config, inputs, fresh=False,
                       resumed=timing.resumed) as (scratch, headline):
        history = write_training_metrics(trainer, scratch)
        losses = [row["loss"] for row in history if "loss" in row]
        headline.update({**counts,
                         "first_loss": losses[0] if losses else None,
                         "final_loss": losses[-1] if losses else None,
                         "train_runtime_s": result.metrics.get("train_runtime")})
    print(f"{config.stage}: {headline}")


if __name__ == "__main__":
    main()
