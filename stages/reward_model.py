"""Trains a reward model with TRL's RewardTrainer (Bradley-Terry on preference pairs) and reports its
held-out pairwise accuracy.

    python -m stages.reward_model --kind helpful --model_path results/tiny/base \
        --data results/tiny/data/preferences_helpful.parquet --output_dir results/tiny/reward_model_helpful

Both of the paper's reward models are trained pairwise here. The paper's safety model is pointwise
(106K responses labelled safe or unsafe); pairs of a safe and an unsafe response to the same prompt
carry the same signal, let one trainer and one metric (pairwise accuracy) serve both models, and
the tiny data can make them directly. The helpful model judges the final summary only; the
harmless model judges the whole response (the final RL stage feeds them accordingly).

The model directory also holds `reward_stats.json`: the mean and standard deviation of the model's
scores on held-out responses, which the final RL stage uses to normalise its rewards.
"""

import json
import statistics

from datasets import Dataset
from transformers import AutoModelForSequenceClassification, set_seed
from transformers.integrations import is_deepspeed_zero3_enabled
from trl import RewardConfig, RewardTrainer

from stages.lib.artifacts import staged_output
from stages.lib.chat_template import load_tokenizer
from stages.lib.cli import parse_config, print_config
from stages.lib.configs import RewardModelStageConfig
from stages.lib.data.schema import read_table
from stages.lib.rewards.model_rewards import REWARD_STATS, score_responses
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


def conversational_pairs(rows: list[dict]) -> Dataset:
    return Dataset.from_list([{"prompt": [{"role": "user", "content": r["prompt"]}],
                               "chosen": [{"role": "assistant", "content": r["chosen"]}],
                               "rejected": [{"role": "assistant", "content": r["rejected"]}]} for r in rows])


def pairwise_accuracy(model, tokenizer, rows: list[dict], max_length: int,
                      batch_size: int = 16) -> tuple[float, list[float]]:
    """Share of pairs whose chosen response scores higher, each text cut at `max_length` tokens as in
    training; and the scores."""
    prompts = [r["prompt"] for r in rows]
    chosen = score_responses(model, tokenizer, prompts, [r["chosen"] for r in rows], batch_size, max_length)
    rejected = score_responses(model, tokenizer, prompts, [r["rejected"] for r in rows], batch_size, max_length)
    return sum(c > r for c, r in zip(chosen, rejected)) / len(rows), chosen + rejected


def trainer_arguments(config: RewardModelStageConfig) -> RewardConfig:
    """TRL's RewardConfig: the stage's keys by name, the translated one below, then `trainer_args`."""
    translated = {"center_rewards_coefficient": config.center_rewards_coefficient or None}  # 0: no centring term
    return RewardConfig(**config.trainer_kwargs(workflow_trainer_defaults(), translated))


def main(argv=None):
    config = parse_config(RewardModelStageConfig, argv)
    print_config(config)
    refuse_data_parallel()
    set_seed(config.seed)
    rows = read_table(config.data, "preference").to_pylist()
    train = [r for r in rows if r["split"] == "train"]
    held_out = [r for r in rows if r["split"] == "eval"]
    if not train or not held_out:
        raise ValueError(f"{config.data}: needs both train and eval pairs (has {len(train)} train, "
                         f"{len(held_out)} eval)")
    inputs = {"model": config.model_path, "data": config.data}
    claim_work_dir(config.work_dir, run_fingerprint(config, inputs))
    # The arguments first: they set this process's device, and a ZeRO-3 config must be registered
    # before the model loads for DeepSpeed to partition it while loading.
    args = trainer_arguments(config)
    tokenizer = load_tokenizer(config.model_path, config.chat_template)
    model = AutoModelForSequenceClassification.from_pretrained(config.model_path, num_labels=1,
                                                               **config.model_kwargs(config.deepspeed))
    model.config.pad_token_id = tokenizer.pad_token_id
    accuracy_before = None
    if args.process_index == 0 and not is_deepspeed_zero3_enabled():  # once, on this process's device
        accuracy_before, _ = pairwise_accuracy(model.to(args.device).eval(), tokenizer, held_out, config.max_length)
    stop, timing = StopOnSignal(), WallTimeInCheckpoints()
    trainer = RewardTrainer(model=model, args=args, train_dataset=conversational_pairs(train),
                            processing_class=tokenizer, callbacks=[stop, timing])
    log_progress(trainer)
    result = trainer.train(resume_from_checkpoint=resume_checkpoint(config.work_dir))
    stop.exit_unless_done(trainer)
    # Every process scores (a ZeRO-3 model's forward pass needs them all); the main one reports.
    accuracy, held_out_scores = pairwise_accuracy(trainer.model.eval(), tokenizer, held_out, config.max_length)

    if not save_model_for_publication(trainer, tokenizer, config.output_dir):
        return  # another process of a multi-GPU run: the main one publishes
    with staged_output(config.output_dir, f"reward_model_{config.kind}", config, inputs,
                       fresh=False, resumed=timing.resumed) as (scratch, headline):
        write_training_metrics(trainer, scratch)
        stats = {"mean": statistics.fmean(held_out_scores), "std": statistics.pstdev(held_out_scores) or 1.0,
                 "max_length": config.max_length}  # the window final RL scores with
        (scratch / REWARD_STATS).write_text(json.dumps(stats) + "\n")
        headline.update({"kind": config.kind, "train_pairs": len(train), "held_out_pairs": len(held_out),
                         "held_out_pairwise_accuracy_before": accuracy_before,
                         "held_out_pairwise_accuracy": accuracy, "score_stats": stats,
                         "train_runtime_s": result.metrics.get("train_runtime")})
    print(f"reward_model_{config.kind}: {headline}")


if __name__ == "__main__":
    main()
