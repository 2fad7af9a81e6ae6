"""Reading a validated config: a section by its key path, a stage's compute entry and wall time, the
container images, where the cold start comes from. The workflow's rules, the config checks and preflight read
the config through these."""

from pathlib import Path

import yaml

CPU_KEYS = ("cpus_per_task", "cpus_per_gpu")  # sbatch takes one or the other, never both


def compute_settings(config: dict, stage: str) -> dict:
    """A stage's `compute` entry over the `default` one (empty without a `compute` section). A stage
    that names its CPUs either way replaces the default's CPU setting, whichever way that was given."""
    section = config.get("compute", {})
    default, own = dict(section.get("default", {})), section.get(stage, {})
    if any(key in own for key in CPU_KEYS):
        for key in CPU_KEYS:
            default.pop(key, None)
    return {**default, **own}


def job_wall_hours(settings: dict) -> float | None:
    """One job's expected wall time from its compute entry: a GPU job's work (`estimated_gpu_hours`, on an
    H100) over its GPUs and their speed (`gpu_speed`), as if it scaled linearly; a CPU job's own
    `estimated_hours`. None without an estimate."""
    gpus = settings.get("gpu", 0) * settings.get("nodes", 1)
    if gpus:
        work = settings.get("estimated_gpu_hours")
        return None if work is None else work / (gpus * settings.get("gpu_speed", 1.0))
    return settings.get("estimated_hours")


def container_images(config: dict) -> dict[str, str]:
    """The CPU and GPU Apptainer images: paths relative to the checkout (where `make containers` builds
    them) or URIs, from the config's `containers` section over the defaults."""
    return {"cpu": "containers/r1-cpu.sif", "gpu": "containers/r1-gpu.sif", **config.get("containers", {})}


def training_world_size(config: dict, stage: str) -> int:
    """Training processes of a stage: its GPUs over all nodes, less those serving vLLM (at least 1)."""
    settings = compute_settings(config, stage)
    gpus = settings.get("gpu", 0) * settings.get("nodes", 1) - settings.get("vllm_server_gpus", 0)
    return max(gpus, 1)


def cold_start_source(config: dict) -> str:
    """What Dev1 learns: `dataset` (the data's cold-start rows) or `r1_zero` (R1-Zero's filtered samples)."""
    return settings_at(config, "cold_start_data").get("source", "dataset")


def settings_at(config: dict, path: str) -> dict:
    """The config section at a dotted key path (empty where there is none)."""
    for key in path.split("."):
        config = config.get(key, {}) if isinstance(config, dict) else {}
    return config


def uses_launcher(settings: dict) -> bool:
    """Whether a job with these compute settings starts stages.launch (several GPUs or nodes, or a vLLM
    server beside the trainers) rather than one plain process."""
    return settings.get("nodes", 1) > 1 or settings.get("gpu", 0) > 1 or bool(settings.get("vllm_server_gpus"))


def deep_update(base: dict, override: dict) -> dict:
    """`override` layered on `base` as Snakemake layers config files: dicts merge, anything else replaces."""
    merged = dict(base)
    for key, value in override.items():
        merged[key] = deep_update(merged[key], value) \
            if isinstance(value, dict) and isinstance(merged.get(key), dict) else value
    return merged


# Mappings whose nulls are values, not removals: trainer_args go to TRL as given (TRL's None is a setting).
NULL_IS_A_VALUE = ("trainer_args",)


def without_removed_keys(config: dict) -> dict:
    """The config, in place, less every key set to null: layered files merge key by key, so a null is how a
    later file removes what an earlier one set (`base: {build: null, name_or_path: ...}` switches the base
    from a tiny model built here to a real one). The workflow applies it before its checks, and so do the
    tools that read the config files themselves (layered_config)."""
    for key, value in list(config.items()):
        if value is None:
            del config[key]
        elif isinstance(value, dict) and key not in NULL_IS_A_VALUE:
            without_removed_keys(value)
    return config


def layered_config(paths) -> dict:
    """Config files as `snakemake --configfile A B` reads them: later files update earlier ones, nulls remove."""
    config: dict = {}
    for path in paths:
        config = deep_update(config, yaml.safe_load(Path(path).read_text()) or {})
    return without_removed_keys(config)
