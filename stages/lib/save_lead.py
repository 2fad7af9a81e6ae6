"""How long before its time limit a training job must be told to stop, so that the step in progress
ends and its checkpoint is written. At the limit Slurm sends SIGTERM and, KillWait later (30 s by
default), SIGKILL: too soon to write a multi-GB checkpoint, so without an earlier signal every time
limit loses the work since the last periodic checkpoint. The workflow asks sbatch for
`--signal=TERM@<lead>` and gives the launcher the same time to wait for the trainers' save.

The lead is the step in progress (the stage's estimate over its steps) plus the checkpoint's write (16
bytes per parameter: weights and Adam's fp32 state, written from every node at once, each at
`checkpoint_write_gb_s`) plus Slurm's own slack. The parameters are counted from the model the job
starts from, once it exists (the workflow asks when it schedules the job).
"""

import json
import math
import struct
from pathlib import Path

BYTES_PER_PARAMETER = 16  # bf16/fp32 weights + fp32 master copy + Adam's two moments, rounded up
SLURM_SLACK_S = 60  # Slurm checks its timers about once a minute: the signal may come that much late
DEFAULT_WRITE_GB_S = 1.0  # a node's sustained write to a parallel filesystem, conservatively (compute key)
DEFAULT_STEP_S = 60  # a step's time where the config gives no estimate (SFT's steps follow from the data)
DEFAULT_LEAD_S = 600  # before the model is there to count (a dry run's plan)
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
               "F8_E4M3": 1, "F8_E5M2": 1}


def parameter_count(model_dir: str | Path) -> int | None:
    """The number of weights in a model directory's safetensors files, read from their headers (no tensor
    is loaded); None when there are none."""
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        return None
    count = 0
    for path in files:
        with path.open("rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(length))
        count += sum(math.prod(entry["shape"]) for name, entry in header.items() if name != "__metadata__")
    return count


def save_lead_s(parameters: int | None, nodes: int, write_gb_s: float, step_s: float) -> int:
    """Seconds before the time limit at which a training job must hear SIGTERM."""
    if parameters is None:
        return DEFAULT_LEAD_S
    write_s = parameters * BYTES_PER_PARAMETER / (max(nodes, 1) * write_gb_s * 1e9)
    return math.ceil(step_s + write_s + SLURM_SLACK_S)


def step_seconds(wall_hours: float | None, max_steps: int | None) -> float:
    """One step's expected time: the job's estimated wall time over its steps."""
    if wall_hours and max_steps and max_steps > 0:
        return wall_hours * 3600 / max_steps
    return DEFAULT_STEP_S
