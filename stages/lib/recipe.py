"""The recipe's stages, each once: the paper's name for what it makes, the module that runs it, how its
model is prompted, what the report compares it with, and whether it may spread over several GPUs.
The rules, the config checks, `start_from`, the report and the model cards read this table, and a
test holds the config schema's stage lists equal to it. Adding a stage is a row here and a rule.

A stage's `name` is its rule, its compute key, its `start_from` key and (unless `settings` says
otherwise) its config section. Its output folder under results/<run>/ is `output`: one folder per
reward model (`{kind}`) or student (`{student}`) where the pattern says so.
"""

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Stage:
    name: str
    label: str  # the paper's name for its output, as the report shows it
    description: str  # the same in a sentence (model cards)
    module: str  # its command line: python -m <module>
    kind: str  # pretraining, grpo, sft, generation, rejection_sampling, reward_model
    output: str
    template: str = "chat"  # how its model is prompted (stages.lib.templates.TEMPLATES; none: it makes no policy)
    compared_with: str = ""  # the output whose evaluation the report measures its change against
    launchable: bool = False  # stages.launch may spread it over several GPUs and nodes
    brought_as: str = ""  # what `start_from` accepts in its place: policy, reward_model, mixture
    rule: str = ""  # its rule, where another stage's rule makes it (default: the name)
    compute: str = ""  # its compute key, where another stage's resources serve (default: the name)
    settings: str = ""  # the key path of its settings in the config (default: the name)
    optional: bool = False  # a config may leave its settings out (cold start from the data set's rows)
    side_rules: tuple[str, ...] = ()  # further rules that run its module on its compute entry's resources

    def __post_init__(self):
        for field_name in ("rule", "compute", "settings"):
            object.__setattr__(self, field_name, getattr(self, field_name) or self.name)


STAGES = {stage.name: stage for stage in (
    Stage("base", "Base", "the base model", "stages.base_model", "pretraining", "base", template="r1_zero"),
    Stage("student", "Student {student} (undistilled)", "a student's base model ({student})", "stages.base_model",
          "pretraining", "student_{student}", template="r1_zero", rule="base", compute="base",
          settings="distill.students.{student}", optional=True),
    Stage("r1_zero", "R1-Zero", "R1-Zero (GRPO on the base model)", "stages.grpo", "grpo", "r1_zero",
          template="r1_zero", compared_with="base", launchable=True, brought_as="policy"),
    # Where `cold_start_data.source` is r1_zero, Dev1 learns R1-Zero's own samples, filtered and rewritten
    # readable, as the paper built its cold start (Supplementary B.3.2); else the data set's cold-start rows.
    Stage("cold_start_samples", "R1-Zero's samples", "R1-Zero's samples for the cold-start data", "stages.generate",
          "generation", "cold_start_samples", template="", compute="generate", settings="cold_start_data.generation",
          optional=True),
    Stage("cold_start_data", "Cold-start data", "the cold-start data built from R1-Zero's samples",
          "stages.rejection_sampling", "rejection_sampling", "cold_start_data", template="",
          compute="rejection_sampling", optional=True),
    Stage("cold_start_sft", "Dev1 (cold-start SFT)", "Dev1 (cold-start SFT)", "stages.sft", "sft", "cold_start_sft",
          compared_with="base", launchable=True, brought_as="policy"),
    Stage("reasoning_rl", "Dev2 (reasoning RL)", "Dev2 (reasoning-oriented RL)", "stages.grpo", "grpo",
          "reasoning_rl", compared_with="cold_start_sft", launchable=True, brought_as="policy"),
    # One job per shard.
    Stage("generate", "Dev2's samples", "Dev2's samples for rejection sampling", "stages.generate", "generation",
          "generate", template="", settings="rejection_sampling.generation"),
    Stage("rejection_sampling", "SFT mixture (rejection sampling)", "the SFT mixture rejection sampling built",
          "stages.rejection_sampling", "rejection_sampling", "rejection_sampling", template="", brought_as="mixture",
          side_rules=("rejection_projection",)),  # the first shards' projection, before the others are sampled
    # Dev3 trains from the base (paper) but learns Dev2's samples: the report compares it with Dev2.
    Stage("mixture_sft", "Dev3 (SFT on the mixture)", "Dev3 (SFT on the rejection-sampled mixture)", "stages.sft",
          "sft", "mixture_sft", compared_with="reasoning_rl", launchable=True, brought_as="policy"),
    Stage("reward_model", "{Kind} reward model", "the {kind} reward model", "stages.reward_model", "reward_model",
          "reward_model_{kind}", template="", launchable=True, brought_as="reward_model",
          settings="reward_model.{kind}"),
    Stage("final_rl", "R1", "R1 (RL for all scenarios)", "stages.grpo", "grpo", "final_rl",
          compared_with="mixture_sft", launchable=True, brought_as="policy"),
    # Distillation helps when the student beats its own undistilled self (evaluation.models: student_<name>).
    Stage("distill", "Distilled {student}", "a distilled student ({student}): SFT on the mixture R1's pipeline built",
          "stages.sft", "sft", "distill_{student}", compared_with="student_{student}", launchable=True,
          settings="distill.sft"),  # a student's own `sft` keys override these
)}
REWARD_MODEL_KINDS = ("helpful", "harmless")


def stages_of_kind(kind: str) -> tuple[str, ...]:
    return tuple(name for name, stage in STAGES.items() if stage.kind == kind)


def required_sections() -> tuple[str, ...]:
    """The config sections a config must have: every stage's, unless optional (the config schema's `required`)."""
    return tuple(dict.fromkeys(stage.settings.partition(".")[0] for stage in STAGES.values() if not stage.optional))


def compute_keys() -> tuple[str, ...]:
    """`compute` keys: `default` applies to every job; `evaluate` is the evaluation job's (it makes no stage's
    output)."""
    return ("default", *dict.fromkeys(stage.compute for stage in STAGES.values()), "evaluate")


def evaluable() -> tuple[str, ...]:
    """The outputs `evaluation.models` may name: each stage's one model (students' by pattern, distill_<name>)."""
    return tuple(stage.output for stage in STAGES.values() if stage.template and "{" not in stage.output)


def brought() -> dict[str, str]:
    """What `start_from` accepts: output folder -> what it must hold (one folder per reward model kind; a
    student's outputs depend on the config, and none is brought)."""
    return {stage.output.format(kind=kind): stage.brought_as for stage in STAGES.values() if stage.brought_as
            for kind in (REWARD_MODEL_KINDS if "{kind}" in stage.output else ("",))}


LAUNCHABLE = tuple(stage.compute for stage in STAGES.values() if stage.launchable)


def _output_pattern(stage: Stage) -> re.Pattern:
    return re.compile(re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[A-Za-z0-9]+)", re.escape(stage.output)) + "$")


def stage_of(output: str) -> tuple[Stage, dict[str, str]]:
    """The stage whose output folder `output` is (distill_small: distill, with student=small)."""
    for stage in STAGES.values():
        match = _output_pattern(stage).match(output)
        if match:
            return stage, match.groupdict()
    raise KeyError(f"{output!r} is no stage's output (stages.lib.recipe.STAGES)")


def label_of(output: str) -> str:
    """The report's name for a stage's output: `Dev2 (reasoning RL)`, `Distilled small`."""
    try:
        stage, values = stage_of(output)
    except KeyError:
        return output
    return stage.label.format(**values, **{k.capitalize(): v.capitalize() for k, v in values.items()})


def description_of(output: str) -> str:
    stage, values = stage_of(output)
    return stage.description.format(**values)


def template_of(output: str) -> str:
    """How the model in a stage's output folder is prompted: R1-Zero's raw template for base models and
    R1-Zero (as the paper does), the chat format for every model after cold-start SFT."""
    return stage_of(output)[0].template


def compared_with(output: str) -> str | None:
    """The output the report measures this one's change against (none for a base model or an output
    that is no stage's)."""
    try:
        stage, values = stage_of(output)
    except KeyError:
        return None
    return stage.compared_with.format(**values) or None
