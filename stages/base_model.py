"""Builds the tiny base model: trains a tokenizer on the corpus, then pre-trains a small Qwen2 causal
LM from scratch, so that it is a weak base model, as DeepSeek-V3-Base is to the paper.

    python -m stages.base_model --corpus results/tiny/data/pretrain.parquet --output_dir results/tiny/base

The result is an ordinary transformers model directory: every later stage loads it with
AutoModelForCausalLM / AutoTokenizer, exactly as it loads a real model id.
"""

from dataclasses import dataclass, field

import torch
from datasets import Dataset
from transformers import (
    DataCollatorForLanguageModeling,
    Qwen2Config,
    Qwen2ForCausalLM,
    Trainer,
    TrainingArguments,
    set_seed,
)

from stages.lib.artifacts import staged_output
from stages.lib.cli import parse_config, print_config
from stages.lib.data.schema import read_table
from stages.lib.stop_tokens import END_OF_TEXT, stop_token_ids
from stages.lib.tokenizer import train_tokenizer
from stages.lib.training import (
    StopOnSignal,
    WallTimeInCheckpoints,
    claim_work_dir,
    log_progress,
    resume_checkpoint,
    run_fingerprint,
    save_model_for_publication,
    workflow_trainer_defaults,
    write_training_metrics,
)


@dataclass
class BaseModelConfig:
    corpus: str = field(metadata={"help": "Parquet file with a `text` column."})
    output_dir: str = field(metadata={"help": "The model directory to write."})
    work_dir: str = field(default="", metadata={"help": "Checkpoints (outside Snakemake's outputs). "
                                                        "Default: <output_dir>.work"})
    stage: str = field(default="base", metadata={"help": "Name recorded in the manifest (base, student_<name>)."})
    seed: int = field(default=0)
    vocab_size: int = field(default=600, metadata={"help": "BPE vocabulary, before the added tags."})
    hidden_size: int = field(default=128)
    num_hidden_layers: int = field(default=4)
    num_attention_heads: int = field(default=4)
    num_key_value_heads: int = field(default=2)
    intermediate_size: int = field(default=384)
    max_position_embeddings: int = field(default=512)
    block_size: int = field(default=256, metadata={"help": "Tokens per packed training sequence."})
    batch_size: int = field(default=16)
    learning_rate: float = field(default=3e-3)
    warmup_steps: int = field(default=30)
    max_steps: int = field(default=600, metadata={"help": "Pre-training steps (the base model's strength)."})
    save_steps: int = field(default=200)
    logging_steps: int = field(default=20)

    def __post_init__(self):
        self.work_dir = self.work_dir or f"{self.output_dir}.work"


def packed_blocks(texts, tokenizer, block_size: int) -> Dataset:
    """Concatenates documents (each ended by <|endoftext|>) and cuts fixed-length blocks."""
    eot = tokenizer.convert_tokens_to_ids(END_OF_TEXT)
    stream = []
    for ids in tokenizer(list(texts), add_special_tokens=False)["input_ids"]:
        stream.extend(ids + [eot])
    n_blocks = len(stream) // block_size
    blocks = torch.tensor(stream[: n_blocks * block_size]).view(n_blocks, block_size)
    return Dataset.from_dict({"input_ids": blocks.tolist()})


def build_model(config: BaseModelConfig, tokenizer) -> Qwen2ForCausalLM:
    model_config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=config.hidden_size, num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads, num_key_value_heads=config.num_key_value_heads,
        intermediate_size=config.intermediate_size, max_position_embeddings=config.max_position_embeddings,
        tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id, eos_token_id=stop_token_ids(tokenizer),
        bos_token_id=None)
    return Qwen2ForCausalLM(model_config)


def main(argv=None):
    config = parse_config(BaseModelConfig, argv)
    print_config(config)
    set_seed(config.seed)
    inputs = {"corpus": config.corpus}
    claim_work_dir(config.work_dir, run_fingerprint(config, inputs))
    texts = read_table(config.corpus, "corpus").column("text").to_pylist()
    tokenizer = train_tokenizer(texts, config.vocab_size)
    model = build_model(config, tokenizer)
    model.generation_config.eos_token_id = stop_token_ids(tokenizer)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    n_params = sum(p.numel() for p in model.parameters())
    blocks = packed_blocks(texts, tokenizer, config.block_size)
    print(f"{n_params:,} parameters, {len(blocks) * config.block_size:,} corpus tokens", flush=True)

    args = TrainingArguments(
        per_device_train_batch_size=config.batch_size, learning_rate=config.learning_rate,
        max_steps=config.max_steps, warmup_steps=config.warmup_steps, lr_scheduler_type="cosine",
        weight_decay=0.1, output_dir=config.work_dir, seed=config.seed, save_steps=config.save_steps,
        logging_steps=config.logging_steps, **workflow_trainer_defaults())
    collator = DataCollatorForLanguageModeling(tokenizer, mlm=False)
    stop, timing = StopOnSignal(), WallTimeInCheckpoints()
    trainer = Trainer(model=model, args=args, train_dataset=blocks, data_collator=collator,
                      processing_class=tokenizer, callbacks=[stop, timing])
    log_progress(trainer)
    result = trainer.train(resume_from_checkpoint=resume_checkpoint(config.work_dir))
    stop.exit_unless_done(trainer)

    if not save_model_for_publication(trainer, tokenizer, config.output_dir):
        return  # another process of a multi-GPU run: the main one publishes
    with staged_output(config.output_dir, config.stage, config, inputs, fresh=False,
                       resumed=timing.resumed) as (scratch, headline):
        history = write_training_metrics(trainer, scratch)
        losses = [row["loss"] for row in history if "loss" in row]
        headline.update({"parameters": n_params, "corpus_tokens": len(blocks) * config.block_size,
                         "final_loss": losses[-1] if losses else None,
                         "train_runtime_s": result.metrics.get("train_runtime")})
    print(f"base model: {headline}")


if __name__ == "__main__":
    main()
