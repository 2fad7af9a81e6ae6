"""The config's checks, run by the workflow before any job starts: the JSON schema (configs/schema.yaml),
reported one short line per problem with the key's path and the fix, then the rules a schema cannot
state (they relate two keys). Each message names the keys."""

import difflib
import importlib
import importlib.util
import json
import os
import re
import types
import typing
import warnings
from dataclasses import MISSING, fields
from pathlib import Path

import yaml
from jsonschema import Draft202012Validator

from stages.lib.chat_template import chat_template_problem, missing_template_error, own_chat_template
from stages.lib.configs import (
    TRACKERS,
    GRPOStageConfig,
    RewardModelStageConfig,
    SFTStageConfig,
    default_of,
    trainer_arg_problems,
    trl_choices,
    trl_field_names,
)
from stages.lib.data.sources import LOCAL_PATH_PREFIXES, SourceError, check_file_type, local_path
from stages.lib.recipe import (
    LAUNCHABLE,
    REWARD_MODEL_KINDS,
    STAGES,
    brought,
    compute_keys,
    evaluable,
    required_sections,
    stages_of_kind,
)
from stages.lib.rewards.external import reference_problem
from stages.lib.rewards.registry import REWARDS, is_reference, reward_name
from stages.lib.settings import (
    compute_settings,
    settings_at,
    training_world_size,
)

GRPO_SECTIONS = stages_of_kind("grpo")
TRAINER_CONFIGS = {"grpo": GRPOStageConfig, "sft": SFTStageConfig, "reward_model": RewardModelStageConfig}
TRAINER_MODULES = {TRAINER_CONFIGS[stage.kind]: stage.module  # whose trainer_arguments builds TRL's config
                   for stage in STAGES.values() if stage.kind in TRAINER_CONFIGS}
REPO = Path(__file__).resolve().parents[2]


SCHEMA = REPO / "configs" / "schema.yaml"
LAYERING = "--configfile configs/tiny.yaml yours.yaml"  # a partial config, layered on a whole one
YAML_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def key_path(parts) -> str:
    """`a.b[2].c`, as a user would point at the key in the YAML file."""
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def known_keys(node: dict, root: dict) -> set[str]:
    """The property names a schema node allows, following local $refs and allOf/anyOf/oneOf."""
    keys = set(node.get("properties", {}))
    if "$ref" in node:
        target = root
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        keys |= known_keys(target, root)
    for combinator in ("allOf", "anyOf", "oneOf"):
        for branch in node.get(combinator, []):
            keys |= known_keys(branch, root)
    return keys


def explain(error, root: dict) -> list[str]:
    where = key_path(error.absolute_path)
    if error.validator in ("additionalProperties", "unevaluatedProperties") and isinstance(error.instance, dict):
        allowed = known_keys(error.schema, root)
        lines = []
        for key in sorted(k for k in error.instance if k not in allowed):
            close = difflib.get_close_matches(key, sorted(allowed), n=1, cutoff=0.6)
            hint = f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(sorted(allowed))}"
            lines.append(f"{key_path([*error.absolute_path, key])}: unknown key; {hint}")
        return lines
    if error.validator == "type" and isinstance(error.instance, str) and YAML_NUMBER.fullmatch(error.instance.strip()):
        mantissa, exponent = f"{float(error.instance):e}".split("e")
        mantissa = mantissa.rstrip("0") + ("0" if mantissa.rstrip("0").endswith(".") else "")
        number = f"{mantissa}e{int(exponent):+d}" if "e" in error.instance.lower() else error.instance.strip()
        return [f"{where}: {error.instance!r} is a string to YAML, not a number: write {number} "
                "(YAML reads an exponent as a number only with a dot and a sign: 3.0e-5, 1.0e+3)"]
    if error.validator in ("oneOf", "anyOf"):
        allowed = sorted({value for branch in error.validator_value for value in branch.get("enum", [])}
                         | {branch["const"] for branch in error.validator_value if "const" in branch})
        # a pattern's branch says what it stands for in its title, where it has one
        patterns = [branch.get("title", f"a name matching {branch['pattern']}")
                    for branch in error.validator_value if "pattern" in branch]
        if allowed:
            return [f"{where}: {error.instance!r} is not one of {allowed}" + "".join(f" or {p}" for p in patterns)]
        if isinstance(error.instance, dict) and all(set(branch) == {"required"} for branch in error.validator_value):
            keys = [key for branch in error.validator_value for key in branch["required"]]
            return [choose_one(where, error.absolute_path, keys, error.instance, only_one=error.validator == "oneOf")]
    if error.validator == "required":
        names = [name for name in error.validator_value if name not in error.instance]
        return [f"{key_path([*error.absolute_path, name])}: missing (required; configs/tiny.yaml shows one)"
                for name in names]
    return [f"{where}: {error.message}"]


def choose_one(where: str, path, keys: list[str], instance: dict, only_one: bool) -> str:
    """A section that must set one of some keys (`build` or `name_or_path`) sets none, or several of them."""
    given = [key for key in keys if key in instance]
    if not given or not only_one:
        return f"{where}: set one of {', '.join(keys)}"
    removal = key_path([*path, given[0]]).rsplit(".", 1)
    return (f"{where}: sets {' and '.join(given)}: choose one (a file layered on another removes a key with null: "
            f"{removal[0]}: {{{removal[-1]}: null}})")


# Keys renamed so that each stage has one name (config section, rule, output folder, start_from key): a
# config written before says which key to rename instead of failing on an unknown and a missing one.
RENAMED = {("base_model",): "base", ("reward_models",): "reward_model", ("distillation",): "distill",
           ("start_from", "mixture"): "rejection_sampling"}


def renamed_key_errors(config: dict) -> list[str]:
    errors = []
    for (*parents, old), new in RENAMED.items():
        node = config
        for parent in parents:
            node = node.get(parent) if isinstance(node, dict) else None
        if isinstance(node, dict) and old in node:
            errors.append(f"{key_path([*parents, old])}: renamed to {key_path([*parents, new])} (a stage's config "
                          "section, rule and output folder share one name now); rename the key")
    return errors


def load_schema(schema_path: Path = SCHEMA) -> dict:
    """The config schema, its lists of stages and rewards filled from their one source each: the stage table
    (stages/lib/recipe.py) and the reward registry (stages/lib/rewards/registry.py)."""
    schema = yaml.safe_load(schema_path.read_text())
    properties = schema["properties"]
    schema["required"] = [*schema["required"], *required_sections()]
    properties["start_from"]["propertyNames"]["enum"] = sorted(brought())
    properties["compute"]["properties"] = {key: {"$ref": "#/$defs/compute"} for key in compute_keys()}
    properties["evaluation"]["properties"]["models"]["items"]["anyOf"][0]["enum"] = list(evaluable())
    properties["tracking"]["properties"]["report_to"]["items"]["enum"] = list(TRACKERS)
    schema["$defs"]["grpo"]["properties"]["rewards"]["items"]["anyOf"][0]["enum"] = list(REWARDS)
    return schema


def schema_errors(config: dict, schema_path: Path = SCHEMA) -> list[str]:
    """One short line per schema violation, sorted by key; a config missing most top-level sections
    is a partial one, and gets one line on layering it instead of a line per section. A key renamed
    since the config was written is named with its new name first."""
    renamed = renamed_key_errors(config)
    if renamed:
        return renamed
    schema = load_schema(schema_path)
    errors = sorted(Draft202012Validator(schema).iter_errors(config), key=lambda e: list(map(str, e.absolute_path)))
    missing = [e for e in errors if e.validator == "required" and not e.absolute_path]
    missing_sections = [name for name in schema.get("required", []) if name not in config]
    if missing and len(missing_sections) > len(schema.get("required", [])) // 2:
        return [f"the config has no {', '.join(missing_sections)}: a config file sets every section; to change a "
                f"few keys, layer yours on a whole config: {LAYERING}"]
    return [line for error in errors for line in explain(error, schema)]


def compute_errors(config: dict) -> list[str]:
    errors = []
    for stage, settings in config.get("compute", {}).items():
        nodes, server = settings.get("nodes", 1), settings.get("vllm_server_gpus", 0)
        if nodes > 1 and stage not in LAUNCHABLE + ("default",):
            errors.append(f"compute.{stage}.nodes = {nodes}, but only {LAUNCHABLE} run on several nodes")
        if server and stage not in GRPO_SECTIONS:
            errors.append(f"compute.{stage}.vllm_server_gpus is for GRPO stages {GRPO_SECTIONS} only")
        if server and not settings.get("gpu"):
            errors.append(f"compute.{stage}.vllm_server_gpus = {server} needs compute.{stage}.gpu")
        accelerate = settings.get("accelerate_config")
        if accelerate and not (REPO / accelerate).is_file() and not Path(accelerate).is_file():
            errors.append(f"compute.{stage}.accelerate_config: no file {accelerate}")
        merged = compute_settings(config, stage)
        if merged.get("gpu") and "estimated_hours" in merged and "estimated_gpu_hours" not in merged:
            gpus, hours = merged["gpu"] * merged.get("nodes", 1), merged["estimated_hours"]
            errors.append(f"compute.{stage}.estimated_hours: a GPU job's estimate is its work, estimated_gpu_hours "
                          f"(GPU-hours on an H100: {gpus} GPUs x {hours:g} h = {gpus * hours:g}), so that its wall "
                          "time follows gpu, nodes and gpu_speed")
    judge = config.get("rejection_sampling", {}).get("judge", {})
    judge_gpus = judge.get("vllm_tensor_parallel_size", 1)
    if judge.get("backend") == "vllm" and "compute" in config and \
            compute_settings(config, "rejection_sampling").get("gpu", 0) < judge_gpus:
        errors.append(f"rejection_sampling.judge runs on vLLM over {judge_gpus} GPU(s) inside the rejection_sampling "
                      f"job: set compute.rejection_sampling.gpu to at least {judge_gpus}")
    return errors


def data_errors(config: dict) -> list[str]:
    """Every local source is there and of a type it can be read as. (A set that no rule makes is named when a
    planned job reads it: rules/common.smk, data_input.)"""
    errors = []
    for stem, sources in config.get("data", {}).get("hub", {}).get("sets", {}).items():
        for index, source in enumerate(sources):
            try:
                local = local_path(source["path"])
                if local is not None and local.is_file():
                    check_file_type(local)
            except SourceError as error:
                errors.append(f"data.hub.sets.{stem}[{index}].path: {error}")
    return errors


def cross_field_errors(config: dict) -> list[str]:
    errors = []
    if "general" in settings_at(config, "cold_start_data").get("targets", {}):
        errors.append("cold_start_data.targets.general: the cold start is R1-Zero's reasoning samples only; "
                      "remove the key (general rows come with rejection_sampling.targets)")
    checked_keys = ("rewards", "reward_weights", "questions_per_step", "num_generations",
                    "gradient_accumulation_steps", "epsilon", "epsilon_high")
    for section in GRPO_SECTIONS:
        grpo = GRPOStageConfig(model_path="", train_data=[], output_dir="",
                               **{key: value for key, value in config.get(section, {}).items() if key in checked_keys})
        errors += grpo.problems(training_world_size(config, section), prefix=f"{section}.")
        if config.get(section, {}).get("use_vllm") and not compute_settings(config, section).get("gpu"):
            errors.append(f"{section}.use_vllm: vLLM generates on GPUs, and compute.{section} gives the stage none: "
                          f"set compute.{section}.gpu, or use_vllm: false")
    students = config.get("distill", {}).get("students", {})
    if "sft" in config.get("base", {}):
        errors.append("base.sft: per-model SFT settings are for distillation students only")
    evaluation = config.get("evaluation", {})
    sets = set(evaluation.get("sets", {}))
    by_set = {"evaluation.settings.samples_per_set": evaluation.get("settings", {}).get("samples_per_set", {}),
              **{f"evaluation.published.{name}.reported": spec.get("reported", {})
                 for name, spec in evaluation.get("published", {}).items()}}
    errors += [f"{where}.{name}: no such set in evaluation.sets (has {sorted(sets)})"
               for where, mapping in by_set.items() for name in sorted(set(mapping) - sets)]
    for model in config.get("evaluation", {}).get("models", []):
        student = model.partition("_")[2] if model.startswith(("distill_", "student_")) else None
        if student is not None and student not in students:
            errors.append(f"evaluation.models names {model}, but distill.students has no "
                          f"'{student}' (has {sorted(students)})")
    return (errors + compute_errors(config) + data_errors(config) + trl_choice_errors(config)
            + trainer_args_errors(config) + tracker_errors(config) + local_model_errors(config)
            + chat_template_errors(config) + reward_errors(config))


def reward_errors(config: dict) -> list[str]:
    """A reward of the user's own imports, names a callable, and logs under a name no other reward of its
    section has (TRL logs rewards/<name>/mean: two of one name would mix their curves)."""
    errors = []
    for section in GRPO_SECTIONS:
        first_of: dict[str, int] = {}
        for index, entry in enumerate(config.get(section, {}).get("rewards", [])):
            where = f"{section}.rewards[{index}]"
            name = reward_name(entry)
            problem = is_reference(entry) and reference_problem(entry)
            if problem:
                errors.append(f"{where}: {entry}: {problem}")
            elif name in first_of:
                errors.append(f"{where}: {entry} logs as rewards/{name}/mean, as {section}.rewards[{first_of[name]}] "
                              "does: give the function another name")
            first_of.setdefault(name, index)
    return errors


def tracker_errors(config: dict) -> list[str]:
    """A tracker is one the environment can import: transformers' callback fails the job without its package."""
    return [f"tracking.report_to: {name} needs the {TRACKERS[name]} package, which this environment lacks (the jobs "
            f"would fail): use tensorboard, or add {TRACKERS[name]} to the locks (containers/lock.py says how)"
            for name in config.get("tracking", {}).get("report_to", [])
            if importlib.util.find_spec(TRACKERS[name]) is None]


def pretrained_models(config: dict) -> dict[str, str]:
    """The key of every `name_or_path` the config sets (base, students, judge) -> its value."""
    models = {"base.name_or_path": config.get("base", {}).get("name_or_path")}
    for student, spec in config.get("distill", {}).get("students", {}).items():
        models[f"distill.students.{student}.name_or_path"] = spec.get("name_or_path")
    judge = settings_at(config, "rejection_sampling").get("judge") or {}
    models["rejection_sampling.judge.name_or_path"] = judge.get("name_or_path")
    for name, spec in config.get("evaluation", {}).get("published", {}).items():
        models[f"evaluation.published.{name}.name_or_path"] = spec.get("name_or_path")
    return {key: value for key, value in models.items() if isinstance(value, str)}


def local_model_errors(config: dict) -> list[str]:
    """A model named by a path must be there now: otherwise it would be planned as a hub download and fail
    there with the hub client's own error about repository ids."""
    errors = []
    for key, value in pretrained_models(config).items():
        if not value.startswith(LOCAL_PATH_PREFIXES) or Path(value).is_dir():
            continue
        if value.startswith("~") and Path(value).expanduser().is_dir():
            errors.append(f"{key}: {value}: write the path without ~ ({Path(value).expanduser()})")
        else:
            errors.append(f"{key}: {value} is not a directory; a local model is a directory with config.json "
                          "(a hub id is owner/name, e.g. Qwen/Qwen2.5-Math-1.5B)")
    return errors


def chat_stages(config: dict) -> dict[str, list[str]]:
    """Each pre-trained model's key (base, distill.students.<name>) -> the stages that render chats with its
    own tokenizer: those that start from it (rules/sft.smk, rules/reward_model.smk) and are planned (not
    brought by `start_from`). Every later chat stage starts from one of their models, which carries the
    template they trained with (stages/lib/chat_template.py)."""
    brought_outputs = set(config.get("start_from", {}))
    initial = {"cold_start_sft": "base", "mixture_sft": settings_at(config, "mixture_sft").get("init"),
               "reward_model": settings_at(config, "reward_model").get("init")}
    over_base = [stage for stage, model in initial.items() if model == "base" and not brought_outputs.issuperset(
        STAGES[stage].output.format(kind=kind) for kind in REWARD_MODEL_KINDS)]
    return {"base": over_base, **{f"distill.students.{name}": ["distill"]
                                  for name in config.get("distill", {}).get("students", {})}}


def chat_template_errors(config: dict) -> list[str]:
    """A `chat_template` key names a usable template. Whether a model needs one is asked per planned job
    (missing_chat_template): only a target that renders chats over the model needs it."""
    errors = []
    for model_key in chat_stages(config):
        spec = settings_at(config, model_key)
        if "chat_template" in spec:
            errors += filter(None, [chat_template_problem(f"{model_key}.chat_template", spec["chat_template"])])
    return errors


def missing_chat_template(model_key: str, spec: dict, stage: str) -> str | None:
    """Why `stage`, which renders chats with the tokenizer of the pre-trained model at `model_key` (base,
    distill.students.<name>), would fail in its job: a local model without a template of its own and no
    `chat_template` key (a hub model: stages.hub_probe says so before the first run). The workflow raises it
    from the stage's input function, so an R1-Zero-only target over such a model plans."""
    path = spec.get("name_or_path")
    if "chat_template" in spec or not isinstance(path, str) or not Path(path).is_dir():
        return None
    return missing_template_error(model_key, path, [stage]) if own_chat_template(path) is None else None


def command_line_errors(errors: list[str], command_line: dict, config_files: list[str]) -> list[str]:
    """Snakemake's `--config key={a: 1}` reads the values inside the braces as strings, so a nested number
    fails the schema with advice to write what was written: say what to do instead."""
    def retyped(node, path):  # the nested keys whose string value YAML would read as another type
        if isinstance(node, dict):
            return [key for name, value in node.items() for key in retyped(value, f"{path}.{name}")]
        return [path] if isinstance(node, str) and not isinstance(yaml.safe_load(node), str) else []

    keys = {top: retyped(value, top) for top, value in command_line.items() if isinstance(value, dict)}
    blamed = {top for top, paths in keys.items()
              if any(line.startswith(f"{path}:") for path in paths for line in errors)}
    layering = f"--configfile {' '.join(config_files)} yours.yaml"
    hints = [f"--config {top}={{...}}: --config sets top-level keys only (it reads nested values as strings); "
             f"write them in a YAML file and layer it: {layering}" for top in sorted(blamed)]
    return hints + [line for line in errors if not line.startswith(tuple(f"{top}." for top in blamed))]


def training_sections(config: dict) -> list[tuple[str, dict, type]]:
    """Every section that configures a trainer: (its key path, the section, its stage config class)."""
    sections = [(path, settings_at(config, path), TRAINER_CONFIGS[stage.kind])
                for stage in STAGES.values() if stage.kind in TRAINER_CONFIGS
                for path in dict.fromkeys(stage.settings.format(kind=kind) for kind in REWARD_MODEL_KINDS)]
    for name in config.get("distill", {}).get("students", {}):  # a student's own `sft` keys, over distill.sft
        path = STAGES["student"].settings.format(student=name) + ".sft"
        sections.append((path, settings_at(config, path), SFTStageConfig))
    return sections


def trl_choice_errors(config: dict) -> list[str]:
    """A key whose values are TRL's choices (`loss_type`, ...) holds one the installed TRL accepts. The stage's
    default needs no look (a test holds it among TRL's), so TRL is imported only for another value (it takes
    seconds)."""
    errors = []
    for where, section, config_class in training_sections(config):
        for name in config_class.TRL_CHOICES:
            value = section.get(name, default_of(config_class, name))
            if value != default_of(config_class, name) and value not in (choices := trl_choices(config_class, name)):
                close = difflib.get_close_matches(str(value), choices, n=1)
                errors.append(f"{where}.{name}: {value!r} is not one of the installed TRL's {choices}"
                              + (f"; did you mean '{close[0]}'?" if close else ""))
    return errors


def trainer_args_errors(config: dict) -> list[str]:
    """`trainer_args` names only fields of the stage's TRL config that nothing else sets, and TRL takes their
    values. TRL is imported only when some section has trainer_args (it takes seconds)."""
    errors = []
    for where, section, config_class in training_sections(config):
        if section.get("trainer_args"):
            trl_fields = trl_field_names(config_class)
            problems = trainer_arg_problems(config_class, section["trainer_args"], trl_fields, where)
            errors += problems or trainer_arg_value_problems(where, section, config_class,
                                                             training_world_size(config, where.split(".")[0]))
    return errors


# TRL config fields whose check needs the job's devices (tf32 asks for an Ampere GPU): typed here, judged there.
JOB_DEVICE_FIELDS = ("bf16", "fp16", "tf32")


def trainer_arg_value_problems(where: str, section: dict, config_class, world_size: int) -> list[str]:
    """One line per `trainer_args` value TRL refuses: a value not of its field's type (`top_k: twenty`), then
    what TRL's own checks refuse when the stage's TRL config is built from the section as the stage builds it
    (its module's `trainer_arguments`, here on the planning machine). A refusal no one key causes alone names
    the section's trainer_args."""
    import trl

    trl_class = getattr(trl, config_class.TRL_CONFIG)
    hints = typing.get_type_hints(trl_class)
    trainer_args = section["trainer_args"]
    problems = [f"{where}.trainer_args.{key}: {value!r} is not {type_name(hints[key])} (TRL's "
                f"{config_class.TRL_CONFIG}.{key})"
                for key, value in trainer_args.items() if not fits(value, hints[key])]
    if problems:
        return problems
    built = {key: value for key, value in trainer_args.items() if key not in JOB_DEVICE_FIELDS}
    refusal = trl_refusal(config_class, section, built, world_size)
    if refusal is None:
        return []
    alone = {key: trl_refusal(config_class, section, {key: value}, world_size) for key, value in built.items()}
    return ([f"{where}.trainer_args.{key}: TRL's {config_class.TRL_CONFIG} refuses it: {reason}"
             for key, reason in alone.items() if reason]
            or [f"{where}.trainer_args: TRL's {config_class.TRL_CONFIG} refuses them together: {refusal}"])


def trl_refusal(config_class, section: dict, trainer_args: dict, world_size: int) -> str | None:
    """The first line of TRL's error when the stage builds its TRL config from the section with these
    trainer_args; None when TRL takes it. DeepSpeed is the job's (its package may be the GPU image's only);
    the environment is left as it was (TRL's config sets variables for the process it runs in)."""
    own = {f.name for f in fields(config_class)}
    placeholders = {f.name: [] if typing.get_origin(f.type) is list else "plan" for f in fields(config_class)
                    if f.default is MISSING and f.default_factory is MISSING} | {"kind": REWARD_MODEL_KINDS[0]}
    keys = {key: value for key, value in section.items() if key in own and key != "trainer_args"}
    stage_config = config_class(**{key: value for key, value in placeholders.items() if key in own}, **keys,
                                deepspeed="", trainer_args=json.dumps(trainer_args))
    module = importlib.import_module(TRAINER_MODULES[config_class])
    extra = {"world_size": world_size, "vllm_stop": {}} if isinstance(stage_config, GRPOStageConfig) else {}
    environment = dict(os.environ)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module.trainer_arguments(stage_config, **extra)
    except Exception as error:  # whatever TRL raises is its reason, told in one line
        return (str(error).strip().splitlines() or [type(error).__name__])[0]
    finally:
        os.environ.clear()
        os.environ.update(environment)
    return None


def fits(value, hint) -> bool:
    """Whether a YAML value is of a TRL field's type (int, float, str, bool, None, lists, dicts, unions of them);
    any other type TRL's own checks judge."""
    origin, arguments = typing.get_origin(hint) or hint, typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(fits(value, argument) for argument in arguments)
    if origin is typing.Literal:
        return value in arguments
    checks = {type(None): lambda v: v is None, bool: lambda v: isinstance(v, bool),
              int: lambda v: isinstance(v, int) and not isinstance(v, bool),
              float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
              str: lambda v: isinstance(v, str), list: lambda v: isinstance(v, list),
              dict: lambda v: isinstance(v, dict)}
    return checks[origin](value) if origin in checks else True


def type_name(hint) -> str:
    return str(hint).replace("typing.", "") if typing.get_args(hint) else getattr(hint, "__name__", str(hint))
