"""GRPO with TRL's GRPOTrainer: R1-Zero (from the base model, R1-Zero template, accuracy + format)
and reasoning RL (Dev2: from Dev1, chat template, accuracy + format + language consistency).

    python -m stages.grpo --stage r1_zero --model_path results/tiny/base --template r1_zero \
        --train_data results/tiny/data/rl_prompts.parquet --output_dir results/tiny/r1_zero

Every knob is a field below with the paper's value in its help. Training curves (total reward, each
reward's mean, completion length, KL, clip ratio, share of groups whose rewards all tie) go to
metrics.jsonl and training_curves.png; a few sampled completions per logging step, with each reward, to
completions.jsonl.
"""

import json
import math
import os
import random
import shutil
from pathlib import Path

from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback, set_seed
from trl import GRPOConfig, GRPOTrainer

from stages.lib.artifacts import staged_output
from stages.lib.cli import parse_config, print_config
from stages.lib.configs import GRPOStageConfig
from stages.lib.data.schema import iter_rows, read_table, tests_at
from stages.lib.plots import plot_training_curves
from stages.lib.rewards.code import has_tests
from stages.lib.rewards.external import ExternalReward, own_reward_files
from stages.lib.rewards.functions import Accuracy, RewardSettings, build_reward_functions
from stages.lib.rewards.grading import gold_problem
from stages.lib.rewards.registry import MODEL_REWARDS, REWARDS, RULE_REWARDS, is_reference, reward_name
from stages.lib.stop_tokens import split_stop_strings, stop_token_ids
from stages.lib.templates import ResponseFormat, reasoning_prefill, response_format
from stages.lib.training import (
    StopOnSignal,
    WallTimeInCheckpoints,
    claim_work_dir,
    log_progress,
    process_device,
    refuse_data_parallel,
    resume_checkpoint,
    run_fingerprint,
    save_model_for_publication,
    workflow_trainer_defaults,
    write_training_metrics,
)


def too_long(row: dict, fmt: ResponseFormat, tokenizer, max_prompt_length: int) -> bool:
    """Whether the rendered prompt is over `max_prompt_length` tokens (0: no limit). TRL's GRPOConfig
    has no prompt limit, and vLLM fails the whole step for one prompt as long as its context."""
    return bool(max_prompt_length) and len(tokenizer(fmt.render(row["prompt"], tokenizer, row["domain"]),
                                                     add_special_tokens=False).input_ids) > max_prompt_length


def prompt_dataset(paths: list[str], fmt: ResponseFormat, max_prompts: int = 0, tokenizer=None,
                   max_prompt_length: int = 0) -> Dataset:
    """R1-Zero prompts are raw text; chat prompts are conversations TRL renders with the chat template.
    Prompts longer than `max_prompt_length` tokens are dropped. A code row carries where its test cases are
    (`tests_at`), not the cases: the code reward reads them when it scores the row."""
    rows = []
    for path in paths:
        for index, row in iter_rows(path, "reasoning"):
            problem = gold_problem(row)
            if problem:
                raise ValueError(f"{path}: row {index} (id {row['id']!r}): {problem}")
            if too_long(row, fmt, tokenizer, max_prompt_length):
                continue
            rows.append({"prompt": fmt.prompt(row["prompt"], row["domain"]), "solution": row["solution"] or None,
                         "tests_at": tests_at(path, index) if has_tests(row.get("tests")) else None,
                         "id": row["id"], "level": row["level"]})
    if not rows:
        raise ValueError(f"no prompt of {paths} fits max_prompt_length={max_prompt_length}")
    return Dataset.from_list(rows[:max_prompts] if max_prompts else rows)


def general_prompt_rows(paths: list[str], fmt: ResponseFormat, tokenizer=None,
                        max_prompt_length: int = 0) -> list[dict]:
    """General prompts have no gold answer: the rule accuracy reward skips them, the reward models score
    them. Those over `max_prompt_length` tokens are dropped, as reasoning prompts are."""
    rows, dropped = [], 0
    for path in paths:
        for row in read_table(path, "general").to_pylist():
            if too_long(row, fmt, tokenizer, max_prompt_length):
                dropped += 1
                continue
            rows.append({"prompt": fmt.prompt(row["prompt"], row["domain"]), "solution": None, "tests_at": None,
                         "id": row["id"], "level": 0})
    if dropped:
        print(f"{dropped} general prompts longer than max_prompt_length={max_prompt_length} dropped", flush=True)
    if not rows:
        raise ValueError(f"no general prompt of {paths} fits max_prompt_length={max_prompt_length}")
    return rows


def general_phase_start(config: GRPOStageConfig) -> int:
    """The first step of final RL's general phase, at a rollout's start: TRL shuffles a rollout's samples
    over its steps, so a phase starting inside one would mix general prompts into the steps before it."""
    rollouts = round(config.max_steps * (1 - config.general_phase_fraction) / config.steps_per_rollout)
    return rollouts * config.steps_per_rollout


def phased_prompts(reasoning: list[dict], general: list[dict], max_steps: int, questions_per_step: int,
                   phase_start: int, general_share: float, seed: int) -> Dataset:
    """The final RL schedule as an ordered dataset: reasoning prompts only before `phase_start`, then
    each step mixes in `general_share` general prompts (the trainer must not shuffle it)."""
    rng = random.Random(seed)
    order = []
    general_per_step = round(questions_per_step * general_share)
    for step in range(max_steps):
        n_general = general_per_step if step >= phase_start else 0
        order += [rng.choice(general) for _ in range(n_general)]
        order += [rng.choice(reasoning) for _ in range(questions_per_step - n_general)]
    return Dataset.from_list(order)


def build_rewards(config: "GRPOStageConfig", settings: RewardSettings) -> list:
    """The rewards the config names, in its order: rule rewards (stages.lib.rewards.registry), reward models
    from the stage keys that name them, and the user's own functions (stages.lib.rewards.external)."""
    model_of = {name: getattr(config, REWARDS[name].model_key) for name in config.rewards if name in MODEL_REWARDS}
    missing = [name for name, path in model_of.items() if not path]
    if missing:
        raise ValueError(f"reward(s) {missing} need --{REWARDS[missing[0]].model_key}")
    by_name = {f.__name__: f for f in build_reward_functions([n for n in config.rewards if n in RULE_REWARDS],
                                                              settings)}
    if model_of:
        from stages.lib.rewards.model_rewards import build_model_rewards

        by_name.update({f.__name__: f for f in build_model_rewards(model_of, process_device(),
                                                                   settings.reasoning_prefill)})
    by_name.update({entry: ExternalReward(entry) for entry in config.rewards if is_reference(entry)})
    return [by_name[name] for name in config.rewards]


class StageMetrics(TrainerCallback):
    """Adds to every log line the accuracy reward's answer-check timeouts and, in final RL, whether
    the general (reward-model) phase has begun."""

    def __init__(self, accuracy: Accuracy | None, phase_start: int | None):
        self.accuracy = accuracy
        self.phase_start = phase_start

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is None:
            return
        extra = {}
        if self.accuracy is not None:
            extra["accuracy/verify_timeouts"] = self.accuracy.grader.verifier.timeouts
        if self.phase_start is not None:
            extra["general_phase"] = int(state.global_step > self.phase_start)
        logs.update(extra)
        if state.log_history:  # the Trainer stored its copy of `logs` before calling back
            state.log_history[-1].update(extra)


COMPLETIONS = "completions.jsonl"
COMPLETIONS_PER_LOG = 4  # sampled completions kept per logging step: the first of the latest rollout (a group)


def finite(value: float) -> float | None:
    return None if math.isnan(value) else value  # a reward that skips a prompt logs NaN; JSON has no NaN


class SampledCompletions(TrainerCallback):
    """Every logging step, a few of the latest rollout's completions with their prompt and each reward, in
    <work_dir>/completions.jsonl, whatever the tracker (TRL logs them only to W&B or trackio): the file grows
    while the stage trains and follows a resumed run (rows after its checkpoint are dropped, as they are
    sampled again); the stage publishes it beside metrics.jsonl. They come from the trainer's `_logs`, the
    rollout TRL gathers from every process for its own completion tables."""

    def __init__(self, work_dir: str, per_log: int = COMPLETIONS_PER_LOG):
        self.path, self.per_log = Path(work_dir) / COMPLETIONS, per_log
        self.trainer = None  # set once the trainer exists

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero and self.path.exists():
            kept = [line for line in self.path.read_text().splitlines()
                    if line.strip() and json.loads(line)["step"] <= state.global_step]
            self.path.write_text("".join(line + "\n" for line in kept))

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs or "train_runtime" in logs:  # the summary at the end
            return
        rollout = self.trainer._logs
        rows = [{"step": state.global_step, "prompt": rollout["prompt"][i], "completion": rollout["completion"][i],
                 "rewards": {name: finite(values[i]) for name, values in rollout["rewards"].items()},
                 "advantage": rollout["advantages"][i]}
                for i in range(min(self.per_log, len(rollout["prompt"])))]
        with self.path.open("a") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows)


REFERENCE_PREFIX = "reference-"


def numbered(directory: Path, prefix: str) -> dict[int, Path]:
    """`<prefix><step>` entries of a directory by step (checkpoints, reference snapshots)."""
    return {int(p.name.removeprefix(prefix)): p for p in directory.glob(f"{prefix}*")
            if p.name.removeprefix(prefix).isdigit()}


def reference_snapshot(work_dir: str, step: int) -> str | None:
    """The newest reference snapshot taken at or before `step` (None: the reference is the input model)."""
    taken = [s for s in numbered(Path(work_dir), REFERENCE_PREFIX) if s <= step]
    return str(Path(work_dir) / f"{REFERENCE_PREFIX}{max(taken)}") if taken else None


class ReferenceSnapshots(TrainerCallback):
    """With the reference refreshed every `ref_model_sync_steps` (to the policy: mixup alpha 1), keeps the
    policy of each refresh in the work directory, since a checkpoint holds no reference: a resumed run
    then starts from the reference an uninterrupted run has at that step, not the stage's input. Keeps
    only the snapshots that the checkpoints still there may need."""

    def __init__(self, work_dir: str, sync_steps: int):
        self.work_dir, self.sync_steps = Path(work_dir), sync_steps
        self.trainer = None  # set once the trainer exists: saving is the trainer's (collective under ZeRO-3)

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % self.sync_steps:
            return
        final = self.work_dir / f"{REFERENCE_PREFIX}{state.global_step}"
        scratch = final.with_name(final.name + ".partial")
        self.trainer.save_model(str(scratch))  # every process: a ZeRO-3 model is gathered
        self.trainer.accelerator.wait_for_everyone()
        if state.is_world_process_zero:
            shutil.rmtree(final, ignore_errors=True)
            os.replace(scratch, final)
            oldest_checkpoint = min(numbered(self.work_dir, "checkpoint-"), default=state.global_step)
            needed = max((s for s in numbered(self.work_dir, REFERENCE_PREFIX) if s <= oldest_checkpoint), default=0)
            for step, snapshot in numbered(self.work_dir, REFERENCE_PREFIX).items():
                if step < needed:
                    shutil.rmtree(snapshot)
        self.trainer.accelerator.wait_for_everyone()


def stop_settings(tokenizer, fmt: ResponseFormat, use_vllm: bool) -> tuple[list[int], dict]:
    """The format's stop strings as extra end-of-sequence ids (one-token strings) and, on vLLM, its
    sampling settings: the stop strings that span several tokens, and every stop id (vLLM builds its
    own sampling parameters and would stop only at the tokenizer's eos)."""
    ids, strings = split_stop_strings(tokenizer, fmt.stop_strings)
    if not use_vllm:
        if strings:
            raise ValueError(f"stop strings {strings} span several tokens: only the vLLM backend can stop on them")
        return ids, {}
    vllm_stop = {"stop_token_ids": stop_token_ids(tokenizer) + ids}
    return ids, vllm_stop | ({"stop": strings, "include_stop_str_in_output": True} if strings else {})


def trainer_arguments(config: GRPOStageConfig, world_size: int, vllm_stop: dict) -> GRPOConfig:
    """TRL's GRPOConfig: the stage's keys by name, the translated ones below (the paper's questions per step
    become completions per device; the template's stop settings), then `trainer_args`."""
    translated = {
        "per_device_train_batch_size": config.per_device_batch_size(world_size),
        "sync_ref_model": config.beta > 0 and config.ref_model_sync_steps > 0,
        "ref_model_sync_steps": config.ref_model_sync_steps or 1, "ref_model_mixup_alpha": 1.0,
        "generation_kwargs": vllm_stop or None,
        "shuffle_dataset": not config.general_data,  # the final RL schedule fixes the order itself
        "epsilon_high": config.epsilon_high or None,  # 0: the same as epsilon
        "vllm_server_host": config.vllm_server_host or "0.0.0.0",
        # TRL counts micro-batches: one rollout feeds steps_per_rollout optimizer steps of accumulation each
        "steps_per_generation": config.steps_per_rollout * config.gradient_accumulation_steps,
    }
    return GRPOConfig(**config.trainer_kwargs(workflow_trainer_defaults(), translated))


def main(argv=None):
    config = parse_config(GRPOStageConfig, argv)
    print_config(config)
    refuse_data_parallel()
    set_seed(config.seed)
    inputs = {"model": config.model_path, **{f"train_data_{i}": p for i, p in enumerate(config.train_data)}}
    # A reward of the user's own is an input: its file's sha256 goes in the manifest, and an edit starts afresh.
    inputs.update({f"reward_{name}": path for name, path in own_reward_files(config.rewards).items()})
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    problems = config.problems(world_size)
    if problems:
        raise ValueError("; ".join(problems))
    claim_work_dir(config.work_dir, run_fingerprint(config, inputs))
    tokenizer = AutoTokenizer.from_pretrained(config.model_path)
    fmt = response_format(config.template)
    extra_stop_ids, vllm_stop = stop_settings(tokenizer, fmt, config.use_vllm)
    if vllm_stop.get("stop") and config.mask_truncated_completions:
        # TRL calls a completion truncated when its last token is no eos: one that vLLM stopped at a
        # stop string of several tokens would count as truncated, and masking would drop them all.
        raise ValueError(f"mask_truncated_completions: the {config.template} template's stop strings "
                         f"{vllm_stop['stop']} span several tokens of this tokenizer, and TRL would mask every "
                         "completion that stopped at one: set mask_truncated_completions: false")

    settings = RewardSettings(template=config.template, language=config.language,
                              max_completion_length=config.max_completion_length,
                              overlong_buffer=config.overlong_buffer or max(1, config.max_completion_length // 4),
                              code_scoring=config.code_scoring, code_timeout_s=config.code_timeout_s,
                              allow_rlimit_only=config.allow_rlimit_only,
                              reasoning_prefill=reasoning_prefill(fmt.render("1 + 1?", tokenizer)))
    reward_functions = build_rewards(config, settings)
    accuracy = next((f for f in reward_functions if isinstance(f, Accuracy)), None)
    dataset = prompt_dataset(config.train_data, fmt, config.max_prompts, tokenizer,
                             config.max_prompt_length)
    phase_start = None
    if config.general_data:
        general = general_prompt_rows(config.general_data, fmt, tokenizer, config.max_prompt_length)
        phase_start = general_phase_start(config)
        dataset = phased_prompts(dataset.to_list(), general, config.max_steps, config.questions_per_step, phase_start,
                                 config.general_share, config.seed)
        inputs.update({f"general_data_{i}": p for i, p in enumerate(config.general_data)})
    print(f"{len(dataset)} prompts", flush=True)

    args = trainer_arguments(config, world_size, vllm_stop)
    # After the arguments: a ZeRO-3 config registered by them makes DeepSpeed partition while loading.
    model = AutoModelForCausalLM.from_pretrained(config.model_path, **config.model_kwargs(config.deepspeed))
    # This stage's sampling also stops at its template's one-token stop strings (</answer>); the published
    # model's generation config names only the template's end tokens (save_model_for_publication).
    model.generation_config.eos_token_id = stop_token_ids(tokenizer) + extra_stop_ids
    stop, timing, samples = StopOnSignal(), WallTimeInCheckpoints(), SampledCompletions(config.work_dir)
    snapshots = ReferenceSnapshots(config.work_dir, args.ref_model_sync_steps) if args.sync_ref_model else None
    checkpoint = resume_checkpoint(config.work_dir)
    if snapshots:
        # TRL builds the reference from the policy's model id: on resume, the last refresh's snapshot
        reference = checkpoint and reference_snapshot(config.work_dir, int(checkpoint.rsplit("-", 1)[1]))
        if reference:
            print(f"reference model: {reference}", flush=True)
            model.config._name_or_path = reference
    trainer = GRPOTrainer(model=model, reward_funcs=reward_functions, args=args, train_dataset=dataset,
                          processing_class=tokenizer,
                          callbacks=[stop, timing, samples, StageMetrics(accuracy, phase_start),
                                     *filter(None, [snapshots])])
    model.config._name_or_path = config.model_path
    samples.trainer = trainer
    if snapshots:
        snapshots.trainer = trainer
    log_progress(trainer)
    result = trainer.train(resume_from_checkpoint=checkpoint)
    stop.exit_unless_done(trainer)

    if not save_model_for_publication(trainer, tokenizer, config.output_dir):
        return  # another process of a multi-GPU run: the main one publishes
    with staged_output(config.output_dir, config.stage, config, inputs, fresh=False,
                       resumed=timing.resumed) as (scratch, headline):
        history = write_training_metrics(trainer, scratch)
        if samples.path.exists():  # none when no step was logged
            shutil.copyfile(samples.path, scratch / COMPLETIONS)
        plot_training_curves(history, scratch / "training_curves.png", title=config.stage)
        steps = [row for row in history if "reward" in row]
        window = max(1, len(steps) // 10)
        for key in ["reward", "completions/mean_length", *[f"rewards/{reward_name(n)}/mean" for n in config.rewards]]:
            # A reward that applied to no prompt of a step (a reward model before its phase) logs None/NaN.
            values = [row[key] for row in steps if isinstance(row.get(key), (int, float)) and not math.isnan(row[key])]
            if values:
                headline[f"first_{key}"] = sum(values[:window]) / len(values[:window])
                headline[f"last_{key}"] = sum(values[-window:]) / len(values[-window:])
        headline["train_runtime_s"] = result.metrics.get("train_runtime")
        headline["verify_timeouts"] = accuracy.grader.verifier.timeouts if accuracy else 0
    print(f"{config.stage}: {headline}")


if __name__ == "__main__":
    main()
