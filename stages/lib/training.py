"""What every training stage shares: CPU-safe trainer defaults, resuming from the work directory,
and the training curves written to metrics.jsonl."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path

import torch
from transformers import GenerationConfig, TrainerCallback
from transformers.trainer_callback import PrinterCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from transformers.utils import GENERATION_CONFIG_NAME

from stages.lib.artifacts import METRICS, duration, partial_dir, path_digest, process_started, wall_time, write_jsonl
from stages.lib.progress import stamp_matches, write_stamp
from stages.lib.stop_tokens import stop_token_ids

FINGERPRINT = "fingerprint.json"
# Settings that change where or how often progress is written, not what it is.
NOT_FINGERPRINTED = ("output_dir", "work_dir", "output_file", "work_file", "logging_steps", "save_steps",
                     "prompts_per_batch", "batch_size", "attn_implementation", "use_liger_kernel", "vllm_server_host",
                     "vllm_server_port", "vllm_gpu_memory_utilization", "report_to", "run_name", "project",
                     "tensorboard_dir", "log_completions")


def refuse_data_parallel() -> None:
    """One process that sees several GPUs would train under torch.nn.DataParallel (the Trainer's choice
    for SFT and reward models) or stop inside TRL (GRPO): neither is what the config asked for."""
    if torch.cuda.is_available() and torch.cuda.device_count() > 1 and int(os.environ.get("WORLD_SIZE", "1")) == 1:
        raise RuntimeError(f"{torch.cuda.device_count()} GPUs are visible to this one process: give the stage "
                           "several GPUs in its compute section (one process per GPU is launched), or show it "
                           "one (CUDA_VISIBLE_DEVICES=0)")


def process_device() -> torch.device:
    """This process's own device: cuda:LOCAL_RANK in a multi-process run. A bare "cuda" means device 0
    in every rank until accelerate sets the current device, which it does only when the trainer's
    arguments are built."""
    if not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))


def run_fingerprint(config, inputs: dict[str, str]) -> dict:
    """What a run's progress depends on: its settings and its inputs' contents."""
    settings = {k: v for k, v in asdict(config).items() if k not in NOT_FINGERPRINTED}
    return {"config": settings,
            "inputs": {name: path_digest(p) if os.path.exists(p) else p for name, p in inputs.items()}}


def process_rank() -> int:
    """This process's rank in a multi-process run (accelerate / torchrun set RANK); 0 when alone."""
    return int(os.environ.get("RANK", "0"))


OWNER = "owner.json"
SLURM_ACTIVE = ("PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "RESIZING", "REQUEUED", "STOPPED")


def this_process() -> dict:
    return {"host": socket.gethostname(), "pid": os.getpid(), "started": process_started(os.getpid()),
            "slurm_job_id": os.environ.get("SLURM_JOB_ID", "")}


# The claiming process touches its owner.json this often while it lives. Where no Slurm client can be asked
# (inside the GPU image, which has none: gpu-path-audit-4, F4), an owner whose file was touched within
# HEARTBEAT_STALE_S is alive; a claimant watches that long before it takes the directory over.
HEARTBEAT_S = 30.0
HEARTBEAT_STALE_S = 4 * HEARTBEAT_S


def start_heartbeat(owner_file: Path) -> None:
    def beat():
        while True:
            time.sleep(HEARTBEAT_S)
            try:
                owner_file.touch()
            except OSError:  # the directory was published or removed: nothing left to guard
                return
    threading.Thread(target=beat, name="work-dir-heartbeat", daemon=True).start()


def heartbeat_alive(owner_file: Path) -> float | None:
    """The seconds since the owner's last heartbeat, if it still beats: a file older than HEARTBEAT_STALE_S is
    stale at once; a fresher one is watched until it is touched again (alive) or goes stale (the owner died
    within the last few minutes)."""
    def age():
        return time.time() - owner_file.stat().st_mtime
    first, seen = age(), owner_file.stat().st_mtime
    while age() < HEARTBEAT_STALE_S:
        if owner_file.stat().st_mtime != seen:
            return first
        time.sleep(min(1.0, HEARTBEAT_S / 4))
    return None


def still_running(owner: dict, owner_file: Path | None = None) -> str | None:
    """How the process that last claimed a work directory is still running (its Slurm job, or its process on
    this host), or None when it is gone. Without a Slurm client here, a Slurm job is alive while its
    heartbeat (`owner_file`'s time) goes on."""
    job = owner.get("slurm_job_id")
    if job:
        if job == os.environ.get("SLURM_JOB_ID"):
            return None  # this job itself (requeued)
        if not shutil.which("squeue"):
            beat = heartbeat_alive(owner_file) if owner_file else None
            return None if beat is None else \
                f"Slurm job {job} (on {owner.get('host', '?')}: its heartbeat {beat:.0f} s ago; no squeue here)"
        done = subprocess.run(["squeue", "--noheader", "--jobs", job, "--format=%T"], capture_output=True, text=True,
                              timeout=60)
        state = done.stdout.strip() if done.returncode == 0 else ""
        return f"Slurm job {job} ({state.lower()})" if state in SLURM_ACTIVE else None
    if owner.get("host") == socket.gethostname() and owner.get("pid") != os.getpid() and \
            process_started(owner.get("pid", 0)) == owner.get("started"):
        return f"process {owner['pid']} on {owner['host']}"
    return None


def claim_work_dir(work_dir: str, fingerprint: dict, wait_s: float = 600.0) -> None:
    """Keeps a work directory's checkpoints only if they came from the same settings and inputs:
    a rerun after a change starts afresh instead of resuming a stale run. In a multi-process run the
    main process decides; the others wait until its stamp says the directory is theirs. A directory that a
    live job still trains in (left running by a Snakemake controller that died) is refused: two trainers
    would write each other's checkpoints."""
    path = Path(work_dir)
    if process_rank() != 0:
        deadline = time.time() + wait_s
        while not stamp_matches(path / FINGERPRINT, fingerprint):
            if time.time() > deadline:
                raise TimeoutError(f"the main process did not claim {work_dir} within {wait_s:.0f} s")
            time.sleep(0.5)
        return
    if (path / OWNER).exists():
        running = still_running(json.loads((path / OWNER).read_text()), path / OWNER)
        if running:
            hint = f"`scancel {running.split()[2]}`" if running.startswith("Slurm") else "stop it"
            raise RuntimeError(f"{work_dir} is in use by {running}, left running by an earlier run (a Snakemake "
                               f"controller that died?): wait for it or {hint}, then run again")
    if path.exists() and not stamp_matches(path / FINGERPRINT, fingerprint):
        print(f"{work_dir} holds progress of other settings or inputs: starting afresh", flush=True)
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / OWNER).write_text(json.dumps(this_process()))
    start_heartbeat(path / OWNER)
    write_stamp(path / FINGERPRINT, fingerprint)


def device_defaults() -> dict:
    """TRL configs default to bf16, which fails on a CPU-only machine. Under DeepSpeed the accelerate
    config's mixed_precision must agree (transformers stops with `ds bf16.enabled=True vs hf bf16`):
    where it asks bf16 of a device without it, one line says which key to change."""
    on_gpu = torch.cuda.is_available()
    bf16 = on_gpu and torch.cuda.is_bf16_supported()
    deepspeed_bf16 = os.environ.get("ACCELERATE_USE_DEEPSPEED") == "true" and \
        os.environ.get("ACCELERATE_MIXED_PRECISION") == "bf16"
    if deepspeed_bf16 and not bf16:
        raise RuntimeError("the accelerate config asks mixed_precision: bf16, which this device lacks ("
                           f"{'a GPU without bf16' if on_gpu else 'no GPU'}): set compute.<stage>.mixed_precision: "
                           "'no' in the config (it overrides the accelerate config's)")
    return {"bf16": bf16, "use_cpu": not on_gpu}


def workflow_trainer_defaults() -> dict:
    """What every trainer gets unless its config says otherwise: checkpoints by steps (two kept), log lines
    without progress bars, no tracker, and the device's precision."""
    return {
        "save_strategy": "steps",
        "save_total_limit": 2,
        "report_to": "none",
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
        **device_defaults(),
    }


def complete_checkpoint(checkpoint: Path) -> bool:
    """The Trainer writes trainer_state.json after the weights, optimizer and RNG states: a checkpoint
    whose write was killed lacks it, or holds a cut-off copy."""
    try:
        json.loads((checkpoint / "trainer_state.json").read_text())
    except (OSError, ValueError):
        return False
    return True


def resume_checkpoint(work_dir: str) -> str | None:
    """The newest checkpoint the Trainer finished writing (it writes trainer_state.json last). The
    main process deletes newer ones whose write was killed; the others only pass them by."""
    if not os.path.isdir(work_dir):
        return None
    checkpoints = [p for p in Path(work_dir).glob(f"{PREFIX_CHECKPOINT_DIR}-*") if p.name.rsplit("-", 1)[-1].isdigit()]
    for checkpoint in sorted(checkpoints, key=lambda p: int(p.name.rsplit("-", 1)[-1]), reverse=True):
        if complete_checkpoint(checkpoint):
            print(f"resuming from {checkpoint}", flush=True)
            return str(checkpoint)
        if process_rank() == 0:
            shutil.rmtree(checkpoint)
    return None


class StopOnSignal(TrainerCallback):
    """Slurm's time limit and preemption send SIGTERM, then SIGKILL after KillWait (30 s by default);
    Ctrl-C sends SIGINT. Either one lets the current step finish, saves a checkpoint and stops
    training; `exit_unless_done` then ends the process without publishing, and a rerun resumes from
    that checkpoint. A second Ctrl-C stops at once. All processes of a multi-GPU run agree on the
    step to stop at (a ZeRO-3 save is collective)."""

    def __init__(self):
        self.received: int | None = None
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handle)

    def _handle(self, signum, _frame):
        self.received = signum
        print(f"received {signal.Signals(signum).name}: saving a checkpoint at the end of this step", flush=True)
        signal.signal(signal.SIGINT, signal.default_int_handler)

    def _agreed(self, args) -> bool:
        stop = self.received is not None
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            flag = torch.tensor([float(stop)], device=args.device)
            torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
            stop = bool(flag.item())
        return stop

    def on_step_end(self, args, state, control, **kwargs):
        if self._agreed(args):
            control.should_save = True
            control.should_training_stop = True
            self.received = self.received or signal.SIGTERM  # another process got it
        return control

    def exit_unless_done(self, trainer) -> None:
        """Ends the process without publishing when a signal stopped training; fails when training ended
        short of its last step otherwise (a resume that trained nothing is not a finished stage)."""
        state = trainer.state
        if self.received is not None:
            print(f"stopped at step {state.global_step} by {signal.Signals(self.received).name}; "
                  f"a rerun resumes from the checkpoint saved there", flush=True)
            sys.exit(128 + self.received)
        if state.global_step < state.max_steps:
            raise RuntimeError(f"training ended at step {state.global_step} of {state.max_steps} with no stop signal: "
                               "the model is not published (a checkpoint from another number of steps or data?); "
                               f"delete {trainer.args.output_dir} to start afresh")


WALL_TIME = "wall_time.json"  # in each checkpoint: the stage's wall time up to it


def checkpoint_dir(args, state) -> Path:
    return Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"


class WallTimeInCheckpoints(TrainerCallback):
    """Each checkpoint records the stage's wall time up to it, so that a resumed stage's manifest counts the
    earlier attempts' time its checkpoint kept (artifacts.wall_time). `resumed` is what the manifest gets."""

    def __init__(self):
        self.resumed: dict | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.global_step:
            return
        checkpoint = checkpoint_dir(args, state)  # the Trainer has loaded its state: we resume from it
        try:
            earlier = json.loads((checkpoint / WALL_TIME).read_text())["wall_time_s"]
        except (OSError, ValueError, KeyError):
            earlier = None  # saved by a version that did not record it
        self.resumed = {"checkpoint": checkpoint.name, "wall_time_s": earlier}

    def on_save(self, args, state, control, **kwargs):
        checkpoint = checkpoint_dir(args, state)
        if state.is_world_process_zero and checkpoint.is_dir():
            (checkpoint / WALL_TIME).write_text(json.dumps({"wall_time_s": wall_time(self.resumed)["wall_time_s"]}))


class ProgressLog(TrainerCallback):
    """One line per logging step in the stage's log, in place of the Trainer's raw dicts:
    `step 40/200 (20%) | 0:03:10 elapsed, ETA 0:12:40 | loss 0.412 | reward 0.55 | accuracy 0.50 | lr 2.0e-05`.
    The ETA is this process's pace over the steps it ran (a resumed run counts from its checkpoint)."""

    SHOWN = (("loss", "loss"), ("reward", "reward"), ("accuracy", "accuracy"), ("learning_rate", "lr"))

    def on_train_begin(self, args, state, control, **kwargs):
        self.started, self.first_step = time.time(), state.global_step

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        logs = dict(logs)
        if "train_runtime" in logs:  # the Trainer's summary at the end
            print(f"done: {state.global_step} steps in {duration(logs['train_runtime'])}", flush=True)
            return
        elapsed = time.time() - self.started
        ran, total = state.global_step - self.first_step, state.max_steps
        eta = duration(elapsed / ran * (total - state.global_step)) if ran else "?"
        fields = [f"step {state.global_step}/{total} ({state.global_step / max(total, 1):.0%})",
                  f"{duration(elapsed)} elapsed, ETA {eta}"]
        for key, label in self.SHOWN:
            value = logs.pop(key, None)
            if value is None:  # e.g. TRL's rewards/accuracy/mean
                value = next((logs.pop(k) for k in list(logs) if key in k and k.endswith("/mean")), None)
            if isinstance(value, (int, float)):
                fields.append(f"{label} {value:.2e}" if label == "lr" else f"{label} {value:.4g}")
        print(" | ".join(fields), flush=True)


def log_progress(trainer) -> None:
    """The trainer's log lines become ProgressLog's (the full history still goes to metrics.jsonl)."""
    trainer.remove_callback(PrinterCallback)
    trainer.add_callback(ProgressLog())


def write_training_metrics(trainer, output_dir) -> list[dict]:
    """The Trainer's log history (restored from the checkpoint on resume, so the curve is whole)."""
    history = list(trainer.state.log_history)
    write_jsonl(Path(output_dir) / METRICS, history)
    return history


def save_model_for_publication(trainer, tokenizer, output_dir) -> bool:
    """Saves the trained model into the output's scratch directory. Every process must call it:
    under DeepSpeed ZeRO-3 the weights are gathered collectively, and only the main process writes.
    Returns whether this is the main process, which alone goes on to publish the output."""
    scratch = partial_dir(output_dir)
    main = trainer.is_world_process_zero()
    if main:
        shutil.rmtree(scratch, ignore_errors=True)
    trainer.accelerator.wait_for_everyone()
    trainer.save_model(str(scratch))
    if main:
        tokenizer.save_pretrained(str(scratch))
        (scratch / "training_args.bin").unlink(missing_ok=True)
        write_stop_tokens(scratch, tokenizer)
    return main


def write_stop_tokens(model_dir: Path, tokenizer) -> None:
    """Every published model names its template's stop tokens in generation_config.json: vLLM stops
    only at the tokenizer's eos and the ids there (a model that carries no generation config, such as
    a reward model, gets none)."""
    if not (model_dir / GENERATION_CONFIG_NAME).exists():
        return
    generation = GenerationConfig.from_pretrained(model_dir)
    generation.eos_token_id = stop_token_ids(tokenizer)
    generation.pad_token_id = tokenizer.pad_token_id
    generation.save_pretrained(model_dir)
