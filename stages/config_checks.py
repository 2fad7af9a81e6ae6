"""Config rules that a JSON schema cannot state (they relate two keys). The workflow runs these
right after schema validation, before any job starts; each message names the keys."""

from pathlib import Path

GRPO_SECTIONS = ("r1_zero", "reasoning_rl", "final_rl")
# Stages that stages.launch can spread over several GPUs and nodes; the others run one process.
LAUNCHED_STAGES = GRPO_SECTIONS + ("cold_start_sft", "mixture_sft", "distill", "reward_model")
# Data sets the main line reads, beyond the evaluation sets.
TRAINING_SETS = ("rl_prompts", "cold_start", "general", "rl_general", "preferences_helpful", "preferences_harmless")
REPO = Path(__file__).resolve().parent.parent


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


def training_world_size(config: dict, stage: str) -> int:
    """Training processes of a stage: its GPUs over all nodes, less those serving vLLM (at least 1)."""
    settings = compute_settings(config, stage)
    gpus = settings.get("gpu", 0) * settings.get("nodes", 1) - settings.get("vllm_server_gpus", 0)
    return max(gpus, 1)


def compute_errors(config: dict) -> list[str]:
    errors = []
    for stage, settings in config.get("compute", {}).items():
        nodes, server = settings.get("nodes", 1), settings.get("vllm_server_gpus", 0)
        if nodes > 1 and stage not in LAUNCHED_STAGES + ("default",):
            errors.append(f"compute.{stage}.nodes = {nodes}, but only {LAUNCHED_STAGES} run on several nodes")
        if server and stage not in GRPO_SECTIONS:
            errors.append(f"compute.{stage}.vllm_server_gpus is for GRPO stages {GRPO_SECTIONS} only")
        if server and not settings.get("gpu"):
            errors.append(f"compute.{stage}.vllm_server_gpus = {server} needs compute.{stage}.gpu")
        accelerate = settings.get("accelerate_config")
        if accelerate and not (REPO / accelerate).is_file() and not Path(accelerate).is_file():
            errors.append(f"compute.{stage}.accelerate_config: no file {accelerate}")
    return errors


def data_errors(config: dict) -> list[str]:
    """A hub config must name every data set that some stage reads."""
    hub = config.get("data", {}).get("hub")
    if hub is None:
        return []
    needed = list(TRAINING_SETS) + list(config.get("evaluation", {}).get("sets", {}).values())
    models = [config.get("base_model", {})] + list(config.get("distillation", {}).get("students", {}).values())
    if any("build" in model for model in models):
        needed.append("pretrain")
    missing = [name for name in needed if name not in hub["sets"]]
    return [f"data.hub.sets has no '{name}' (a stage reads it)" for name in missing]


def cross_field_errors(config: dict) -> list[str]:
    errors = []
    for section in GRPO_SECTIONS:
        grpo = config.get(section, {})
        rewards = grpo.get("rewards", ["accuracy", "format"])
        weights = grpo.get("reward_weights", [1.0] * len(rewards))
        if len(weights) != len(rewards):
            errors.append(f"{section}.reward_weights has {len(weights)} value(s) but {section}.rewards names "
                          f"{len(rewards)}: {rewards}")
        completions = grpo.get("questions_per_step", 32) * grpo.get("num_generations", 16)
        accumulation = grpo.get("gradient_accumulation_steps", 1)
        world = training_world_size(config, section)
        if completions % (accumulation * world):
            errors.append(f"{section}: questions_per_step x num_generations = {completions} completions per step "
                          f"do not split over {world} training GPU(s) x gradient_accumulation_steps = "
                          f"{accumulation} micro-batches")
    students = config.get("distillation", {}).get("students", {})
    if "sft" in config.get("base_model", {}):
        errors.append("base_model.sft: per-model SFT settings are for distillation students only")
    for model in config.get("evaluation", {}).get("models", []):
        if model.startswith("distill_") and model.removeprefix("distill_") not in students:
            errors.append(f"evaluation.models names {model}, but distillation.students has no "
                          f"'{model.removeprefix('distill_')}' (has {sorted(students)})")
    return errors + compute_errors(config) + data_errors(config)
