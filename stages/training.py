"""What every training stage shares: CPU-safe trainer defaults, resuming from the work directory,
and the training curves written to metrics.jsonl."""

import json
import os
import shutil
from dataclasses import asdict
from pathlib import Path

import torch
from dataclasses import dataclass, field
from transformers.trainer_utils import get_last_checkpoint

from stages.artifacts import METRICS, path_digest, write_jsonl

FINGERPRINT = "fingerprint.json"
# Settings that change where or how often progress is written, not what it is.
NOT_FINGERPRINTED = ("output_dir", "work_dir", "output_file", "work_file", "logging_steps", "save_steps",
                     "prompts_per_batch", "batch_size", "attn_implementation", "use_liger_kernel", "vllm_server_host",
                     "vllm_server_port", "vllm_gpu_memory_utilization")


@dataclass(kw_only=True)
class AcceleratorOptions:
    """GPU-only speed knobs every trainer takes (real configs); none changes what is learned."""

    attn_implementation: str = field(default="", metadata={
        "help": "e.g. flash_attention_2 or sdpa (empty: the model's default)."})
    use_liger_kernel: bool = field(default=False, metadata={"help": "Liger's fused kernels (GPU)."})

    def model_kwargs(self) -> dict:
        return {"dtype": "auto", **({"attn_implementation": self.attn_implementation} if self.attn_implementation else {})}


def run_fingerprint(config, inputs: dict[str, str]) -> dict:
    """What a run's progress depends on: its settings and its inputs' contents."""
    settings = {k: v for k, v in asdict(config).items() if k not in NOT_FINGERPRINTED}
    return {"config": settings,
            "inputs": {name: path_digest(p) if os.path.exists(p) else p for name, p in inputs.items()}}


def progress_is_stale(stamp: Path, fingerprint: dict) -> bool:
    """Whether progress guarded by `stamp` was made with other settings or inputs (or unstamped)."""
    return not stamp.exists() or stamp.read_text() != json.dumps(fingerprint, sort_keys=True, default=str)


def write_stamp(stamp: Path, fingerprint: dict) -> None:
    stamp.write_text(json.dumps(fingerprint, sort_keys=True, default=str))


def claim_work_dir(work_dir: str, fingerprint: dict) -> None:
    """Keeps a work directory's checkpoints only if they came from the same settings and inputs:
    a rerun after a change starts afresh instead of resuming a stale run."""
    path = Path(work_dir)
    if path.exists() and progress_is_stale(path / FINGERPRINT, fingerprint):
        print(f"{work_dir} holds progress of other settings or inputs: starting afresh", flush=True)
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
    write_stamp(path / FINGERPRINT, fingerprint)


def device_defaults() -> dict:
    """TRL configs default to bf16, which fails on a CPU-only machine."""
    on_gpu = torch.cuda.is_available()
    return {"bf16": on_gpu and torch.cuda.is_bf16_supported(), "use_cpu": not on_gpu}


def common_trainer_args(work_dir: str, seed: int, save_steps: int, logging_steps: int) -> dict:
    return {
        "output_dir": work_dir,
        "seed": seed,
        "save_strategy": "steps",
        "save_steps": save_steps,
        "save_total_limit": 2,
        "logging_steps": logging_steps,
        "report_to": [],
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
        **device_defaults(),
    }


def resume_checkpoint(work_dir: str) -> str | None:
    """The newest checkpoint the Trainer finished writing (it writes trainer_state.json last)."""
    if not os.path.isdir(work_dir):
        return None
    last = get_last_checkpoint(work_dir)
    while last and not os.path.exists(os.path.join(last, "trainer_state.json")):
        shutil.rmtree(last)  # a checkpoint whose write was killed
        last = get_last_checkpoint(work_dir)
    if last:
        print(f"resuming from {last}", flush=True)
    return last


def write_training_metrics(trainer, output_dir) -> list[dict]:
    """The Trainer's log history (restored from the checkpoint on resume, so the curve is whole)."""
    history = [row for row in trainer.state.log_history]
    write_jsonl(Path(output_dir) / METRICS, history)
    return history


def save_model(trainer, tokenizer, output_dir) -> None:
    trainer.save_model(str(output_dir))
    tokenizer.save_pretrained(str(output_dir))
    for leftover in ("training_args.bin",):
        path = Path(output_dir) / leftover
        if path.exists():
            path.unlink()
