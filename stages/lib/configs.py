"""The training stages' configs: one dataclass per trainer, each a stage's command line (stages/lib/cli.py)
and the keys of its config section (configs/schema.yaml; a test holds the two equal). Torch-free, so
the workflow's config checks read their defaults here too.

Each names the paper's knobs with the paper's values in their help. Every other field of TRL's own
config class (SFTConfig, GRPOConfig, RewardConfig) is reachable through `trainer_args`: a section's
`trainer_args: {vllm_server_timeout: 600}` goes to the trainer as given, after `trainer_arg_problems`
has checked each name against TRL's class (before any job runs, and again in the stage).
"""

import difflib
import json
import os
import re
import typing
from dataclasses import MISSING, dataclass, field, fields
from enum import Enum
from typing import ClassVar

from stages.lib.recipe import REWARD_MODEL_KINDS
from stages.lib.rewards.registry import REWARDS
from stages.lib.templates import TEMPLATES

TRACKERS = {"tensorboard": "tensorboard", "wandb": "wandb", "trackio": "trackio"}  # report_to name -> its package


@dataclass(kw_only=True)
class AcceleratorOptions:
    """GPU-only speed knobs every trainer takes (real configs); none changes what is learned."""

    attn_implementation: str = field(default="", metadata={
        "help": "e.g. flash_attention_2 or sdpa (empty: the model's default)."})
    use_liger_kernel: bool = field(default=False, metadata={"help": "Liger's fused kernels (GPU)."})

    def model_kwargs(self, deepspeed: str = "") -> dict:
        """Weights load in fp32 unless DeepSpeed trains them: it keeps fp32 master copies of bf16 weights,
        while the plain Trainer's bf16 is autocast only, and AdamW steps of 1e-6..1e-5 on bf16 weights
        round away (bf16 resolution near 0.02 is ~1e-4)."""
        import torch  # here: Snakemake imports this module to check configs, and needs no torch

        dtype = "auto" if uses_deepspeed(deepspeed) else torch.float32
        return {"dtype": dtype,
                **({"attn_implementation": self.attn_implementation} if self.attn_implementation else {})}


@dataclass(kw_only=True)
class TrackingOptions:
    """Experiment tracking through the Trainer's own integrations (the config's `tracking` section)."""

    report_to: list[str] = field(default_factory=list, metadata={
        "help": f"Trackers to log to: {', '.join(TRACKERS)} (none: metrics.jsonl and the log only)."})
    run_name: str = field(default="", metadata={"help": "The run's name in the tracker (rules: <run_name>/<stage>)."})
    project: str = field(default="", metadata={"help": "W&B / trackio project (empty: the tracker's default)."})
    tensorboard_dir: str = field(default="", metadata={
        "help": "Where TensorBoard's event files go (rules: results/<run>/tensorboard/<stage>). "
                "Default: <output_dir>.tensorboard"})

    def tracking_args(self, output_dir: str) -> dict:
        """Trainer arguments for the trackers. transformers 5 reads TensorBoard's directory and W&B's
        project from the environment only (TENSORBOARD_LOGGING_DIR, WANDB_PROJECT), so they are set here."""
        unknown = [name for name in self.report_to if name not in TRACKERS]
        if unknown:
            raise ValueError(f"report_to: unknown tracker(s) {unknown}; use {list(TRACKERS)}")
        if "tensorboard" in self.report_to:
            os.environ["TENSORBOARD_LOGGING_DIR"] = self.tensorboard_dir or f"{output_dir}.tensorboard"
        if self.project:
            os.environ["WANDB_PROJECT"] = self.project
        return {"report_to": list(self.report_to) or "none", **({"run_name": self.run_name} if self.run_name else {}),
                **({"project": self.project} if self.project else {})}


def uses_deepspeed(deepspeed: str = "") -> bool:
    """A DeepSpeed config given to the stage, or one `accelerate launch` took from its config file."""
    return bool(deepspeed) or os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true"


# TRL fields the workflow sets itself, never a config's trainer_args: where each comes from instead.
WORKFLOW_OWNED = {
    "output_dir": "the stage's work directory (checkpoints), set by the rule",
    "seed": "the config's top-level `seed`",
    "report_to": "the config's `tracking.report_to`",
    "run_name": "the config's `run_name` (each stage is the run <run_name>/<stage>)",
    "project": "the config's `tracking.project`",
    # SFT renders every conversation (its length filter) before TRL would read this
    "chat_template_path": "the pre-trained model's `chat_template` (base.chat_template, "
                          "distill.students.<name>.chat_template)",
}


# TRL fields every training stage computes from its own keys: TRL's output_dir holds the checkpoints (the
# stage's output_dir is the published model), tracking goes through `tracking_args`, no DeepSpeed is None.
COMMON_TRANSLATED = {"output_dir": ("work_dir",), "report_to": ("report_to", "tensorboard_dir"),
                     "run_name": ("run_name",), "project": ("project",), "deepspeed": ("deepspeed",)}
# Keys every training stage reads itself and no TRL field takes (output_dir: where it publishes the model).
COMMON_STAGE_ONLY = frozenset({"model_path", "output_dir", "trainer_args", "attn_implementation"})
CHAT_TEMPLATE_HELP = ("A Jinja file, or a tokenizer directory, whose chat template replaces the model's own (rules: "
                      "the pre-trained model's `chat_template` key); the trained model is saved with it.")


@dataclass(kw_only=True)
class TrainerPassThrough:
    """How a stage config reaches TRL's config: every field TRL's class also has goes by its name, except
    the TRANSLATED ones, which the stage computes by hand from the keys named; STAGE_ONLY fields reach no
    TRL field; TRAINER_DEFAULTS are the workflow's choices where TRL's default differs; then TRL's other
    knobs by TRL's own names (`trainer_args` in a training section). `reach_problems` holds the four
    together (a test runs it), so a field that reaches nothing, or a TRL rename, fails loudly."""

    TRL_CONFIG: ClassVar[str]  # the TRL config class the stage builds
    TRANSLATED: ClassVar[dict[str, tuple[str, ...]]]  # TRL field -> the stage's keys it is computed from
    STAGE_ONLY: ClassVar[frozenset[str]]
    TRAINER_DEFAULTS: ClassVar[dict] = {}  # trainer_args may still set these
    # fields whose values are TRL's choices, not the stage's (a loss type TRL adds is one key away): checked against
    # the installed TRL before any job runs (trl_choices), never against a copied list
    TRL_CHOICES: ClassVar[tuple[str, ...]] = ()

    trainer_args: str = field(default="{}", metadata={
        "help": "JSON object of further TRL config fields, passed to the trainer as given "
                "(e.g. '{\"vllm_server_timeout\": 600}'); a knob this stage names has its own key."})

    def trainer_overrides(self) -> dict:
        """`trainer_args` as keyword arguments for TRL's config; a problem stops the stage with its names."""
        try:
            overrides = json.loads(self.trainer_args)
        except json.JSONDecodeError as error:
            raise ValueError(f"trainer_args is not a JSON object ({error}): {self.trainer_args!r}") from None
        if not isinstance(overrides, dict):
            raise ValueError(f"trainer_args must be a JSON object of TRL config fields, got {self.trainer_args!r}")
        problems = trainer_arg_problems(type(self), overrides, trl_field_names(type(self)))
        if problems:
            raise ValueError("; ".join(problems))
        return overrides

    def trainer_kwargs(self, workflow_defaults: dict, translated: dict) -> dict:
        """TRL config arguments, later ones winning: `workflow_defaults` (the trainer's CPU-safe settings), this
        stage's TRAINER_DEFAULTS, every field TRL also has by its name, the translated fields (the stage's hand
        code computes `translated`; the common ones are here), then `trainer_args`."""
        translated = self.common_translated() | translated
        undeclared = sorted(set(translated) - set(self.TRANSLATED))
        if undeclared:
            raise TypeError(f"{type(self).__name__} computes {undeclared} without declaring them in TRANSLATED")
        by_name = {name: getattr(self, name) for name in by_name_fields(type(self), trl_field_names(type(self)))}
        return workflow_defaults | self.TRAINER_DEFAULTS | by_name | translated | self.trainer_overrides()

    def common_translated(self) -> dict:
        return {"output_dir": self.work_dir, "deepspeed": self.deepspeed or None,
                **self.tracking_args(self.output_dir)}


def by_name_fields(config_class, trl_fields: set[str]) -> list[str]:
    """The stage config's fields that go to TRL's config as they are, under the same name."""
    return [f.name for f in fields(config_class) if f.name in trl_fields and f.name not in config_class.TRANSLATED]


def reach_problems(config_class, trl_fields: set[str]) -> list[str]:
    """Where TRL's fields ∪ TRANSLATED's keys ∪ STAGE_ONLY do not partition the stage config's fields."""
    own = {f.name for f in fields(config_class)}
    sources = {key for keys in config_class.TRANSLATED.values() for key in keys}
    reached = set(by_name_fields(config_class, trl_fields)) | sources | config_class.STAGE_ONLY
    name, trl = config_class.__name__, config_class.TRL_CONFIG
    return ([f"{name}.{key} reaches no field of TRL's {trl}: pass it by TRL's name, compute a TRANSLATED field "
             "from it, or declare it STAGE_ONLY" for key in sorted(own - reached)]
            + [f"{name}.TRANSLATED names {key}, no field of TRL's {trl} (renamed?)"
               for key in sorted(set(config_class.TRANSLATED) - trl_fields)]
            + [f"{name}.STAGE_ONLY names {key}, a field of TRL's {trl}: it would go there by name"
               for key in sorted(config_class.STAGE_ONLY & trl_fields - set(config_class.TRANSLATED))]
            + [f"{name}: {key} (TRANSLATED or STAGE_ONLY) is no field of the stage config"
               for key in sorted((sources | config_class.STAGE_ONLY) - own)])


def trl_field_names(config_class) -> set[str]:
    """The fields of the TRL config class a stage config builds (imports TRL: only when asked)."""
    import trl

    return {f.name for f in fields(getattr(trl, config_class.TRL_CONFIG))}


def trainer_arg_problems(config_class, overrides: dict, trl_fields: set[str], section: str = "") -> list[str]:
    """One line per `trainer_args` key that is no field of the stage's TRL config (with the closest
    name), or that the stage sets from a key of its own, or the workflow sets (with where to set it).
    `section` is the config section's key path (the stage's own check has none: it names flags)."""
    where = f"{section}.trainer_args" if section else "trainer_args"
    own_key = (lambda key: f"{section}.{key}") if section else (lambda key: f"--{key}")
    own = {f.name for f in fields(config_class)}
    problems = []
    for key in overrides:
        if key in WORKFLOW_OWNED:
            problems.append(f"{where}.{key}: set by the workflow from {WORKFLOW_OWNED[key]}")
        elif key in own:
            problems.append(f"{where}.{key}: the stage has its own key for it: set {own_key(key)} instead")
        elif key in config_class.TRANSLATED:
            sources = ", ".join(own_key(source) for source in config_class.TRANSLATED[key])
            problems.append(f"{where}.{key}: the stage derives it from {sources}; set that instead")
        elif key not in trl_fields:
            close = difflib.get_close_matches(key, sorted(trl_fields), n=1, cutoff=0.6)
            hint = f"did you mean '{close[0]}'?" if close else "see its fields in TRL's documentation"
            problems.append(f"{where}.{key}: not a field of TRL's {config_class.TRL_CONFIG}; {hint}")
    return problems


def trl_choices(config_class, name: str) -> list[str]:
    """What the installed TRL accepts for a field of the stage's TRL config class: the values of the field's
    enum (transformers' SchedulerType), else the values TRL's docstring lists for it (`"dapo"`, `"cispo"`, ...),
    the list its trainer dispatches on (GRPOConfig validates none of them). Imports TRL."""
    import trl

    trl_class = getattr(trl, config_class.TRL_CONFIG)
    kinds = typing.get_args(typing.get_type_hints(trl_class)[name]) or (typing.get_type_hints(trl_class)[name],)
    enum = next((kind for kind in kinds if isinstance(kind, type) and issubclass(kind, Enum)), None)
    if enum is not None:
        return [member.value for member in enum]
    entry = re.search(rf"^( +){name} \(.*?(?=^\1\S|\Z)", trl_class.__doc__, re.S | re.M)
    return list(dict.fromkeys(re.findall(r'`"([^"`]+)"`', entry.group(0)))) if entry else []


def default_of(config_class, name: str):
    """A field's default, for code that reads a config section's absent key (the config checks)."""
    spec = next(f for f in fields(config_class) if f.name == name)
    return spec.default_factory() if spec.default is MISSING else spec.default


@dataclass
class SFTStageConfig(AcceleratorOptions, TrackingOptions, TrainerPassThrough):
    TRL_CONFIG = "SFTConfig"
    TRANSLATED = COMMON_TRANSLATED | {"lr_scheduler_kwargs": ("min_lr_rate", "lr_scheduler_type"),
                                      "warmup_steps": ("warmup_ratio",)}
    STAGE_ONLY = COMMON_STAGE_ONLY | {"train_data", "stage", "max_examples", "max_dropped_share",
                                      "extend_context_to", "chat_template"}
    TRL_CHOICES = ("lr_scheduler_type",)

    model_path: str = field(metadata={"help": "Initial model: the base model (paper), or any checkpoint."})
    train_data: list[str] = field(metadata={"help": "Parquet files of conversations (`messages` column)."})
    output_dir: str = field(metadata={"help": "The model directory to write."})
    work_dir: str = field(default="", metadata={"help": "Checkpoints, outside Snakemake's outputs. "
                                                        "Default: <output_dir>.work"})
    stage: str = field(default="sft", metadata={"help": "Name recorded in the manifest (cold_start_sft, ...)."})
    chat_template: str = field(default="", metadata={"help": CHAT_TEMPLATE_HELP})
    seed: int = field(default=0)
    learning_rate: float = field(default=5e-6, metadata={"help": "Paper, Dev3: 5e-6; "
                                                                 "distillation 1e-4 (1.5B) .. 2e-5 (70B)."})
    num_train_epochs: float = field(default=2.0, metadata={"help": "Paper, Dev3: 2 epochs; distillation 2-3."})
    max_steps: int = field(default=-1, metadata={"help": "Stop after this many steps (-1: run the epochs)."})
    per_device_train_batch_size: int = field(default=8)
    gradient_accumulation_steps: int = field(default=1, metadata={"help": "Paper, Dev3: global batch 64."})
    max_length: int = field(default=1024, metadata={"help": "Tokens per example (paper: 32,768); a longer "
                                                            "conversation is left out, never cut."})
    max_examples: int = field(default=0, metadata={
        "help": "Train on the first this many examples that fit max_length (0: every one that fits): read a larger "
                "pool to select traces that fit."})
    max_dropped_share: float = field(default=0.05, metadata={
        "help": "Fail before training when fewer than (1 - this) of the examples asked for (max_examples, else all "
                "read) fit max_length, saying how many and why."})
    extend_context_to: int = field(default=0, metadata={
        "help": "Set the model's max_position_embeddings to this before training, as DeepSeek did for its distilled "
                "Qwen2.5-Math students (4,096 -> 131,072, rope_theta kept). 0: the model's own."})
    packing: bool = field(default=False, metadata={"help": "Pack examples (bfd, padding-free): fewer padding "
                                                           "tokens on long-tailed data (bench/sft_tokens.py)."})
    lr_scheduler_type: str = field(default="cosine_with_min_lr", metadata={
        "help": "Any scheduler of the installed transformers (its SchedulerType)."})
    min_lr_rate: float = field(default=0.1, metadata={"help": "Cosine decay to this fraction of the peak "
                                                              "(paper: 1/10)."})
    warmup_ratio: float = field(default=0.03, metadata={"help": "Share of the steps spent warming up, in [0, 1)."})
    weight_decay: float = field(default=0.0)
    gradient_checkpointing: bool = field(default=False)
    deepspeed: str = field(default="", metadata={"help": "DeepSpeed JSON config (GPU runs)."})
    save_steps: int = field(default=100)
    logging_steps: int = field(default=10)

    def __post_init__(self):
        self.work_dir = self.work_dir or f"{self.output_dir}.work"


@dataclass
class GRPOStageConfig(AcceleratorOptions, TrackingOptions, TrainerPassThrough):
    TRL_CONFIG = "GRPOConfig"
    TRANSLATED = COMMON_TRANSLATED | {
        "per_device_train_batch_size": ("questions_per_step", "num_generations", "gradient_accumulation_steps"),
        "sync_ref_model": ("beta", "ref_model_sync_steps"), "ref_model_sync_steps": ("ref_model_sync_steps",),
        "ref_model_mixup_alpha": ("ref_model_sync_steps",), "generation_kwargs": ("template",),
        "shuffle_dataset": ("general_data",), "epsilon_high": ("epsilon_high",),
        "vllm_server_host": ("vllm_server_host",),
        "steps_per_generation": ("steps_per_rollout", "gradient_accumulation_steps")}
    STAGE_ONLY = COMMON_STAGE_ONLY | {
        "train_data", "stage", "template", "rewards", "language", "max_prompt_length", "max_prompts",
        "overlong_buffer", "code_scoring", "code_timeout_s", "allow_rlimit_only", "general_data",
        "helpful_reward_model", "harmless_reward_model", "general_phase_fraction", "general_share",
        "steps_per_rollout"}
    TRAINER_DEFAULTS = {"lr_scheduler_type": "constant", "warmup_steps": 0}  # the paper's constant rate
    TRL_CHOICES = ("loss_type", "scale_rewards", "importance_sampling_level")

    model_path: str = field(metadata={"help": "Policy to start from: the base model (R1-Zero) or Dev1 "
                                              "(reasoning RL)."})
    train_data: list[str] = field(metadata={"help": "Reasoning parquet files (`prompt`, `solution` or `tests`)."})
    output_dir: str = field(metadata={"help": "The model directory to write."})
    work_dir: str = field(default="", metadata={"help": "Checkpoints, outside Snakemake's outputs. "
                                                        "Default: <output_dir>.work"})
    stage: str = field(default="grpo", metadata={"help": "Name recorded in the manifest "
                                                         "(r1_zero, reasoning_rl, ...)."})
    template: str = field(default="chat", metadata={"help": "Prompt template and response format, "
                                                            f"one of {TEMPLATES}."})
    rewards: list[str] = field(default_factory=lambda: ["accuracy", "format"],
                               metadata={"help": f"Of {', '.join(REWARDS)} (the reward models': final RL), or a "
                                                 "TRL reward function of your own: path/to/file.py:function or "
                                                 "module:function. A row is scored by accuracy (gold answer) or "
                                                 "code (tests)."})
    reward_weights: list[float] = field(default_factory=lambda: [1.0, 1.0],
                                        metadata={"help": "One per reward. Paper: accuracy and format equal."})
    language: str = field(default="en", metadata={"help": "Target language of the CoT for the language reward."})
    seed: int = field(default=0)
    learning_rate: float = field(default=3e-6, metadata={"help": "Paper: 3e-6."})
    beta: float = field(default=0.001, metadata={"help": "KL coefficient (paper: 0.001); 0 loads no reference model."})
    ref_model_sync_steps: int = field(default=400, metadata={"help": "Refresh the reference model every N steps "
                                                                     "(paper: 400; 0: never)."})
    epsilon: float = field(default=0.2, metadata={"help": "Clip range (paper: 10, in its sequence-level form)."})
    epsilon_high: float = field(default=0.0, metadata={"help": "Upper clip range, DAPO clip-higher 0.28 "
                                                               "(0: same as epsilon)."})
    importance_sampling_level: str = field(default="token", metadata={"help": "token, or sequence "
                                                                              "(GSPO / the paper's form)."})
    loss_type: str = field(default="grpo", metadata={"help": "grpo (paper), or any loss type of the installed TRL's "
                                                             "GRPOConfig: dr_grpo, dapo, cispo, ..."})
    scale_rewards: str = field(default="group", metadata={"help": "group (paper), batch, or none (Dr. GRPO)."})
    num_generations: int = field(default=16, metadata={"help": "G, outputs per question (paper: 16)."})
    questions_per_step: int = field(default=32, metadata={"help": "Questions per optimizer step "
                                                                  "(paper: 32, so 512 outputs)."})
    gradient_accumulation_steps: int = field(default=1, metadata={"help": "Splits a step's outputs "
                                                                          "into micro-batches."})
    steps_per_rollout: int = field(default=1, metadata={
        "help": "Optimizer steps trained on one rollout (paper: 16: 512 questions x 16 outputs sampled at once, "
                "trained as 16 steps of 32 questions). Old log-probs are recomputed, and TRL corrects vLLM's "
                "sampling by importance weights."})
    num_iterations: int = field(default=1, metadata={"help": "mu: optimisation passes over each batch."})
    max_prompt_length: int = field(default=0, metadata={"help": "Drop prompts longer than this many tokens "
                                                                "(0: keep all)."})
    max_completion_length: int = field(default=32768, metadata={"help": "Paper: 32,768 (65,536 after step 8.2k)."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature (paper: 1.0; final RL 0.7)."})
    top_p: float = field(default=1.0)
    mask_truncated_completions: bool = field(default=False, metadata={"help": "DAPO overlong filtering."})
    overlong_buffer: int = field(default=0, metadata={"help": "DAPO soft overlong punishment window "
                                                              "(L_cache) for the `overlong` reward."})
    code_scoring: str = field(default="pass_all", metadata={
        "help": "`code` reward: 1 when every test case passes (paper), or `fraction` of cases passed."})
    code_timeout_s: float = field(default=5.0, metadata={"help": "`code` reward: wall clock per test case."})
    allow_rlimit_only: bool = field(default=False, metadata={
        "help": "`code` reward: run model code without namespace isolation where bubblewrap is missing (unsafe)."})
    max_steps: int = field(default=10400, metadata={"help": "Paper, R1-Zero: 10,400 steps."})
    save_steps: int = field(default=100)
    logging_steps: int = field(default=1)
    log_completions: bool = field(default=False, metadata={
        "help": "Sampled prompts, completions and rewards to the tracker at each logging step "
                "(TRL; W&B and trackio tables)."})
    max_prompts: int = field(default=0, metadata={"help": "Use only the first N prompts (0: all)."})
    general_data: list[str] = field(default_factory=list, metadata={
        "help": "Final RL: general prompts (general parquet), rewarded by the reward models."})
    helpful_reward_model: str = field(default="", metadata={"help": "Final RL: the `helpful_rm` reward's model "
                                                                    "(judges the summary)."})
    harmless_reward_model: str = field(default="", metadata={"help": "Final RL: the `harmless_rm` reward's model "
                                                                     "(judges the whole response)."})
    general_phase_fraction: float = field(default=400 / 1700, metadata={
        "help": "Final RL: general prompts only in this last share of the steps (paper: 400 of 1,700)."})
    general_share: float = field(default=0.5, metadata={"help": "Final RL: share of each step's questions "
                                                                "that are general during that phase."})
    use_vllm: bool = field(default=False, metadata={"help": "Generate with vLLM (GPU)."})
    vllm_mode: str = field(default="colocate", metadata={"help": "colocate, or server "
                                                                 "(`trl vllm-serve` on another node)."})
    vllm_server_host: str = field(default="", metadata={"help": "Host of `trl vllm-serve` in server mode."})
    vllm_server_port: int = field(default=8000)
    vllm_gpu_memory_utilization: float = field(default=0.3, metadata={"help": "Colocate: GPU memory share "
                                                                              "vLLM takes from training."})
    vllm_tensor_parallel_size: int = field(default=1, metadata={"help": "Colocate: GPUs per vLLM engine."})
    deepspeed: str = field(default="", metadata={"help": "DeepSpeed JSON config (GPU runs)."})
    gradient_checkpointing: bool = field(default=False)

    def __post_init__(self):
        self.work_dir = self.work_dir or f"{self.output_dir}.work"
        if self.template not in TEMPLATES:
            raise ValueError(f"template must be one of {TEMPLATES}, got {self.template!r}")

    def problems(self, world_size: int | None = None, prefix: str = "") -> list[str]:
        """What the stage cannot run with: a weight per reward, a clip range whose upper side is not below its
        lower one and, given the training processes, a step's completions that split evenly into micro-batches.
        `prefix` names the config section (the checks)."""
        problems = []
        if len(self.reward_weights) != len(self.rewards):
            problems.append(f"{prefix}reward_weights has {len(self.reward_weights)} value(s) but {prefix}rewards "
                            f"names {len(self.rewards)}: {self.rewards}")
        completions = self.questions_per_step * self.num_generations
        if world_size is not None and completions % (world_size * self.gradient_accumulation_steps):
            # each step of a rollout takes its own questions_per_step, so a rollout splits when a step does
            problems.append(f"{prefix}questions_per_step x num_generations = {completions} completions per step do "
                            f"not split over {world_size} training process(es) x gradient_accumulation_steps = "
                            f"{self.gradient_accumulation_steps} micro-batches"
                            + splitting_counts(completions, world_size, self.gradient_accumulation_steps))
        if self.steps_per_rollout < 1:
            problems.append(f"{prefix}steps_per_rollout must be 1 or more, not {self.steps_per_rollout}")
        if 0 < self.epsilon_high < self.epsilon:
            problems.append(f"{prefix}epsilon_high = {self.epsilon_high:g} is below {prefix}epsilon = "
                            f"{self.epsilon:g}: the upper clip range is at least the lower one (DAPO: 0.28 over 0.2); "
                            "0 makes it the same")
        return problems

    def per_device_batch_size(self, world_size: int) -> int:
        """TRL counts completions per device per micro-batch; the paper counts questions per step."""
        problems = self.problems(world_size)
        if problems:
            raise ValueError("; ".join(problems))
        return self.questions_per_step * self.num_generations // (world_size * self.gradient_accumulation_steps)


def nearest_divisors(number: int, near: int) -> list[int]:
    """The divisors of `number` next to `near`: the largest below it and the smallest above it, where there are."""
    divisors = [divisor for divisor in range(1, number + 1) if number % divisor == 0]
    below, above = [d for d in divisors if d < near], [d for d in divisors if d > near]
    return below[-1:] + above[:1]


def splitting_counts(completions: int, world_size: int, accumulation: int) -> str:
    """What would split a step's completions, next to what does not: training processes with these
    gradient_accumulation_steps, or gradient_accumulation_steps with these processes (the config checks' fix)."""
    fixes = []
    if completions % accumulation == 0:
        counts = nearest_divisors(completions // accumulation, world_size)
        fixes += [f"{' or '.join(map(str, counts))} training processes do"] if counts else []
    if completions % world_size == 0:
        steps = nearest_divisors(completions // world_size, accumulation)
        fixes += [f"gradient_accumulation_steps {' or '.join(map(str, steps))} does"] if steps else []
    return f": {', or '.join(fixes)}" if fixes else ""


@dataclass
class RewardModelStageConfig(AcceleratorOptions, TrackingOptions, TrainerPassThrough):
    TRL_CONFIG = "RewardConfig"
    TRANSLATED = COMMON_TRANSLATED | {"center_rewards_coefficient": ("center_rewards_coefficient",)}
    STAGE_ONLY = COMMON_STAGE_ONLY | {"kind", "data", "chat_template"}
    TRAINER_DEFAULTS = {"lr_scheduler_type": "cosine", "warmup_steps": 0.05}

    kind: str = field(metadata={"help": f"One of {REWARD_MODEL_KINDS}."})
    model_path: str = field(metadata={"help": "Initial checkpoint (a sequence-classification head is added)."})
    data: str = field(metadata={"help": "Preference parquet with a `split` column (train / eval)."})
    output_dir: str = field(metadata={"help": "The reward model directory to write."})
    work_dir: str = field(default="", metadata={"help": "Checkpoints. Default: <output_dir>.work"})
    chat_template: str = field(default="", metadata={"help": CHAT_TEMPLATE_HELP})
    seed: int = field(default=0)
    learning_rate: float = field(default=6e-6, metadata={"help": "Paper: 6e-6."})
    num_train_epochs: float = field(default=1.0, metadata={"help": "Paper: 1 epoch."})
    per_device_train_batch_size: int = field(default=8, metadata={"help": "Paper: global batch 256."})
    gradient_accumulation_steps: int = field(default=1)
    max_length: int = field(default=8192, metadata={"help": "Paper: 8,192 tokens."})
    center_rewards_coefficient: float = field(default=0.0, metadata={"help": "Keeps scores centred on 0."})
    deepspeed: str = field(default="")
    save_steps: int = field(default=100)
    logging_steps: int = field(default=10)

    def __post_init__(self):
        self.work_dir = self.work_dir or f"{self.output_dir}.work"
        if self.kind not in REWARD_MODEL_KINDS:
            raise ValueError(f"kind must be one of {REWARD_MODEL_KINDS}, got {self.kind!r}")
