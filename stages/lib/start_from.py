"""Artifacts a user brings (`start_from: {stage: path}` in the config): checked before any job runs,
so a wrong path or an incomplete model fails at once with the stage, the path and what is missing."""

from pathlib import Path

import pyarrow.parquet as pq

from stages.lib.artifacts import MIXTURE
from stages.lib.data.schema import SCHEMAS
from stages.lib.recipe import brought

# What each artifact that can be brought is (stages.lib.recipe): a causal LM, a reward model (sequence
# classifier), or the SFT mixture, whose table is this file.
DATA_FILES = {"mixture": MIXTURE}
WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")


def model_problems(path: Path, reward_model: bool) -> list[str]:
    from transformers import AutoConfig  # only when a config brings artifacts

    problems = []
    if not (path / "config.json").is_file():
        return ["no config.json (not a Hugging Face model directory)"]
    try:
        config = AutoConfig.from_pretrained(path)
    except Exception as error:  # any failure to load is the message
        return [f"config.json does not load: {error}"]
    if not any(next(path.glob(pattern), None) for pattern in WEIGHT_PATTERNS):
        problems.append(f"no weights ({' or '.join(WEIGHT_PATTERNS)})")
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        problems.append(f"no tokenizer ({', '.join(TOKENIZER_FILES)})")
    architectures = config.architectures or []
    if reward_model and not any(a.endswith("ForSequenceClassification") for a in architectures):
        problems.append(f"not a reward model: architectures {architectures}, expected a *ForSequenceClassification")
    if not reward_model and any(a.endswith("ForSequenceClassification") for a in architectures):
        problems.append(f"a reward model ({architectures}) where a policy is expected")
    return problems


def data_problems(path: Path, filename: str) -> list[str]:
    table_path = path / filename
    if not table_path.is_file():
        return [f"no {filename}"]
    try:
        columns = pq.read_schema(table_path).names
    except Exception as error:
        return [f"{filename} is not a parquet file: {error}"]
    missing = [name for name in SCHEMAS["sft"].names if name not in columns]
    return [f"{filename} lacks column(s) {missing} (has {columns})"] if missing else []


def artifact_problems(stage: str, path: str) -> list[str]:
    """Everything wrong with `path` as stage `stage`'s output; empty when it can stand in for it."""
    bringable = brought()
    if stage not in bringable:
        return [f"start_from.{stage}: not a stage that can be brought (one of {list(bringable)})"]
    directory = Path(path)
    if not directory.is_dir():
        return [f"start_from.{stage}: {path} is not a directory"]
    if bringable[stage] == "mixture":
        problems = data_problems(directory, DATA_FILES[bringable[stage]])
    else:
        problems = model_problems(directory, reward_model=bringable[stage] == "reward_model")
    return [f"start_from.{stage}: {path}: {problem}" for problem in problems]
