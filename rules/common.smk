# Config loading, schema validation, and every path pattern and input function of the workflow.
import os
import shlex

from snakemake.utils import validate

from stages.config_checks import cross_field_errors
from stages.templates import template_for_stage

validate(config, schema="../configs/schema.yaml")
CONFIG_ERRORS = cross_field_errors(config)
if CONFIG_ERRORS:
    raise ValueError("invalid config:\n  " + "\n  ".join(CONFIG_ERRORS))

wildcard_constraints:
    shard=r"\d+",
    student=r"[A-Za-z0-9]+",
    kind=r"helpful|harmless",


RUN_DIR = os.path.join(config["results_dir"], config["run_name"])


def result(*parts):
    """results/<run>/<parts...>: every artifact path is built here."""
    return os.path.join(RUN_DIR, *parts)


def work_dir(stage):
    """Checkpoints live beside the outputs, never inside them: Snakemake deletes outputs before a rerun."""
    return result(".work", stage)


def log_file(stage):
    return result("logs", f"{stage}.log")


def benchmark_file(stage):
    return result("benchmarks", f"{stage}.tsv")


def data_file(name):
    return result("data", f"{name}.parquet")


def stage_args(section, exclude=()):
    """A config section as `--key value` flags for the stage CLI (its dataclass fields); `exclude`
    names the section's wiring keys, which are not flags."""
    flags = []
    for key, value in section.items():
        if key in exclude:
            continue
        values = value if isinstance(value, list) else [value]
        flags.append(f"--{key} " + " ".join(shlex.quote(str(v).lower() if isinstance(v, bool) else str(v)) for v in values))
    return " ".join(flags)


def student_base(student):
    return f"student_{student}"


def pretrained_model_spec(stage):
    """The `build` / `name_or_path` section of a pre-trained model (the base, or a student's)."""
    if stage == "base":
        return config["base_model"]
    if stage.startswith("student_"):
        return config["distillation"]["students"][stage.removeprefix("student_")]
    return None


def is_hub_model(stage):
    spec = pretrained_model_spec(stage)
    return spec is not None and "build" not in spec


def model_ref(stage):
    """What a stage's model is called on a command line: a directory here, or a hub id."""
    return pretrained_model_spec(stage)["name_or_path"] if is_hub_model(stage) else result(stage)


def model_input(stage):
    """The model as a Snakemake input: nothing for a hub id (downloaded by the job itself)."""
    return [] if is_hub_model(stage) else result(stage)


def shard_file(shard):
    return result("rejection_sampling", "shards", f"shard-{shard}.jsonl")


def all_shard_files():
    return [shard_file(i) for i in range(config["rejection_sampling"]["num_shards"])]


def distilled_students():
    return [f"distill_{name}" for name in config["distillation"]["students"]]


def eval_set_files():
    return {name: data_file(stem) for name, stem in config["evaluation"]["sets"].items()}


def eval_set_args():
    return " ".join(f"{name}={path}" for name, path in eval_set_files().items())


def eval_dir(stage):
    return result("eval", stage)


def evaluated_models():
    return config["evaluation"]["models"]
