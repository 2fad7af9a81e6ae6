"""Artifacts a user brings (`start_from: {stage: path}` in the config): checked before any job runs,
so a wrong path or an incomplete model fails at once with the stage, the path and what is missing; then linked
into the run's folder, so that changing one in place reruns what reads it."""

import json
import os
from pathlib import Path

import pyarrow.parquet as pq

from stages.lib.artifacts import MIXTURE, path_digest, write_whole
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


def stat_signature(directory: str) -> list:
    """Each file's name, size and modification time: what tells cheaply that nothing changed."""
    return sorted([str(path.relative_to(directory)), path.stat().st_size, path.stat().st_mtime_ns]
                  for path in Path(directory).rglob("*") if path.is_file())


def link_brought(path: str, link: str | os.PathLike) -> str:
    """The run's link to a brought artifact (results/<run>/start_from/<stage>), which the rules read it through.
    Snakemake dates a directory by its `.snakemake_timestamp`, which a copy of an earlier run's output carries
    and which never moves when the files beside it change, and dates a link by the later of its own time and
    its target's. So the link is made anew (dated now) when the artifact's content (its sha256, as the manifests
    record it) or its path changes, and what reads it reruns; otherwise it keeps its date. The digest is taken
    again only when a file's name, size or time changed (`<link>.json` records them)."""
    link = Path(link)
    target, record = os.path.abspath(path), link.with_name(link.name + ".json")
    known = json.loads(record.read_text()) if record.exists() else {}
    signature = stat_signature(target)
    linked = link.is_symlink() and os.readlink(link) == target and known.get("target") == target
    if linked and known.get("stat") == signature:
        return str(link)
    digest = path_digest(target)
    link.parent.mkdir(parents=True, exist_ok=True)
    if not linked or known.get("sha256") != digest:
        scratch = link.with_name(link.name + ".partial")
        scratch.unlink(missing_ok=True)
        scratch.symlink_to(target, target_is_directory=True)
        os.replace(scratch, link)
    write_whole(record, json.dumps({"target": target, "sha256": digest, "stat": signature}) + "\n")
    return str(link)
