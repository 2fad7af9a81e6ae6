"""Config rules that a JSON schema cannot state (they relate two keys). The workflow runs these
right after schema validation, before any job starts; each message names the keys."""

GRPO_SECTIONS = ("r1_zero", "reasoning_rl", "final_rl")


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
        if completions % accumulation:
            errors.append(f"{section}: questions_per_step x num_generations = {completions} completions per step "
                          f"do not split into gradient_accumulation_steps = {accumulation} micro-batches")
    students = config.get("distillation", {}).get("students", {})
    for model in config.get("evaluation", {}).get("models", []):
        if model.startswith("distill_") and model.removeprefix("distill_") not in students:
            errors.append(f"evaluation.models names {model}, but distillation.students has no "
                          f"'{model.removeprefix('distill_')}' (has {sorted(students)})")
    return errors
