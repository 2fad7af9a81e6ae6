"""The stage configs and the config schema say the same thing, and TRL's other knobs reach the trainer
from a config file (`trainer_args`), with mistakes named before any job runs."""

import shlex
import typing
from dataclasses import fields

import pytest
import yaml

from stages.data.prepare import PrepareConfig
from stages.data.tiny import TinyDataConfig
from stages.evaluate import EvaluateConfig
from stages.generate import GenerateConfig
from stages.lib.cli import parse_config
from stages.lib.config_checks import SCHEMA, cross_field_errors
from stages.lib.configs import (
    GRPOStageConfig,
    RewardModelStageConfig,
    SFTStageConfig,
    by_name_fields,
    default_of,
    reach_problems,
    trl_field_names,
)
from stages.rejection_sampling import RejectionConfig
from tests.snakemake_helpers import REPO, merged, planned_job_details, snakemake, write_config

TRACKING = {"report_to", "run_name", "project", "tensorboard_dir"}
# schema node -> (the stage config behind it, the fields the rules fill instead of a config key; chat_template:
# the pre-trained model's key)
SECTIONS = {
    "$defs.sft_fields": (SFTStageConfig, {"model_path", "train_data", "output_dir", "work_dir", "stage", "seed",
                                          "chat_template", *TRACKING}),
    "$defs.grpo": (GRPOStageConfig, {"model_path", "train_data", "output_dir", "work_dir", "stage", "seed",
                                     "template", "general_data", "helpful_reward_model", "harmless_reward_model",
                                     "log_completions", *TRACKING}),
    "$defs.reward_model": (RewardModelStageConfig, {"kind", "model_path", "data", "output_dir", "work_dir", "seed",
                                                    "chat_template", *TRACKING}),
    "$defs.sampling": (
        GenerateConfig, {"model_path", "prompts", "output_file", "work_file", "shard_index", "num_shards", "template",
                         "seed"}),
    "properties.evaluation.properties.settings": (EvaluateConfig, {"model_path", "output_dir", "eval_sets", "template",
                                                                   "seed"}),
}
JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array"}


def schema_node(path: str) -> dict:
    node = yaml.safe_load(SCHEMA.read_text())
    for part in path.split("."):
        node = node[part]
    return node


def resolved(node: dict, root: dict) -> dict:
    while "$ref" in node:
        target = root
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node


@pytest.mark.parametrize("path", SECTIONS)
def test_each_schema_section_has_exactly_its_stage_config_s_keys_and_types(path):
    config_class, wired = SECTIONS[path]
    root = yaml.safe_load(SCHEMA.read_text())
    properties = schema_node(path)["properties"]
    hints = typing.get_type_hints(config_class)
    flags = {f.name for f in fields(config_class)}
    assert set(properties) - flags == set(), "schema keys that are no flag of the stage"
    assert flags - wired - set(properties) == set(), "stage flags no config can set"
    assert not wired & set(properties), "a flag the rules fill is also a config key"
    for key, spec in properties.items():
        spec = resolved(spec, root)
        assert "default" not in spec, f"{path}.{key}: defaults live in {config_class.__name__} only"
        python_type = typing.get_origin(hints[key]) or hints[key]
        if spec["type"] == "object":  # trainer_args, samples_per_set: a mapping, carried as one JSON flag
            assert python_type is str, f"{path}.{key}: a mapping is one JSON flag, a str field"
        else:
            assert spec["type"] == JSON_TYPES[python_type], f"{path}.{key}: {spec['type']} vs {hints[key]}"
        for value in spec.get("enum", []):  # every allowed value is one the stage accepts
            assert isinstance(value, python_type), (key, value)


def test_the_rejection_filters_and_judge_sections_are_the_rejection_stage_s_flags():
    filters = set(schema_node("$defs.filters")["properties"])
    judge = set(schema_node("properties.rejection_sampling.properties.judge")["properties"])
    flags = {f.name for f in fields(RejectionConfig)}
    judge_flags = {name for name in flags if name.startswith("judge_")}
    wired = {"stage", "shards", "general_data", "output_dir", "targets", "template", "language", "work_dir", "seed",
             "projection_file", "projected_num_shards"}  # the projection rule sets these two
    assert flags - judge_flags - wired == filters
    # judge: name_or_path is fetched into --judge_model, domains become --judge_domains
    assert {f"judge_{key}" for key in judge - {"name_or_path", "revision", "domains"}} | {
        "judge_model", "judge_domains"} == judge_flags


@pytest.mark.parametrize("path, config_class, wired", [
    ("properties.data.properties.tiny", TinyDataConfig, {"output_dir", "seed", "sets"}),
    ("$defs.build", None, set()),
])
def test_data_and_pre_training_sections_are_their_stage_s_flags(path, config_class, wired):
    if config_class is None:
        from stages.base_model import BaseModelConfig as config_class
        wired = {"corpus", "output_dir", "work_dir", "stage", "seed"}
    flags = {f.name for f in fields(config_class)}
    assert flags - wired == set(schema_node(path)["properties"])


def test_hub_data_section_keys_are_prepare_data_s_flags():
    keys = set(schema_node("properties.data.properties.hub")["properties"]) - {"sets"}  # sets: wiring
    assert keys <= {f.name for f in fields(PrepareConfig)}


def test_the_config_checks_read_their_defaults_from_the_stage_configs():
    # r1_zero sets none of these: the check must use GRPOStageConfig's defaults (32 x 16 = 512 over 3 GPUs fails)
    config = yaml.safe_load((REPO / "configs" / "qwen2.5-1.5b.yaml").read_text())
    for key in ("questions_per_step", "num_generations", "gradient_accumulation_steps"):
        config["r1_zero"].pop(key, None)
    config["compute"]["r1_zero"] = {"gpu": 3}
    expected = default_of(GRPOStageConfig, "questions_per_step") * default_of(GRPOStageConfig, "num_generations")
    assert f"r1_zero.questions_per_step x num_generations = {expected} completions" in "\n".join(
        cross_field_errors(config))


TRAINER_CONFIGS = (SFTStageConfig, GRPOStageConfig, RewardModelStageConfig)


@pytest.mark.parametrize("config_class", TRAINER_CONFIGS)
def test_every_stage_key_reaches_trl_by_name_by_translation_or_is_declared_stage_only(config_class):
    assert reach_problems(config_class, trl_field_names(config_class)) == []


def test_a_stage_key_that_reaches_nothing_or_a_trl_rename_fails_the_partition():
    from dataclasses import dataclass, field

    @dataclass
    class WithNewKnob(GRPOStageConfig):
        clip_ratio_c: float = field(default=3.0)  # added to the stage, never handed to TRL

    assert reach_problems(WithNewKnob, trl_field_names(GRPOStageConfig)) == [
        "WithNewKnob.clip_ratio_c reaches no field of TRL's GRPOConfig: pass it by TRL's name, compute a "
        "TRANSLATED field from it, or declare it STAGE_ONLY"]
    renamed = trl_field_names(GRPOStageConfig) - {"vllm_server_host", "num_iterations"}  # as a TRL release might
    assert reach_problems(GRPOStageConfig, renamed) == [
        "GRPOStageConfig.num_iterations reaches no field of TRL's GRPOConfig: pass it by TRL's name, compute a "
        "TRANSLATED field from it, or declare it STAGE_ONLY",
        "GRPOStageConfig.TRANSLATED names vllm_server_host, no field of TRL's GRPOConfig (renamed?)"]


@pytest.mark.parametrize("config_class, stage_module, extra", [
    (SFTStageConfig, "stages.sft", ()), (GRPOStageConfig, "stages.grpo", (2, {"stop": ["</answer>"]})),
    (RewardModelStageConfig, "stages.reward_model", ())])
def test_the_stage_computes_exactly_the_translated_fields_and_every_other_trl_key_arrives_by_name(
        config_class, stage_module, extra, tmp_path, monkeypatch):
    import importlib

    module = importlib.import_module(stage_module)
    for variable in ("TENSORBOARD_LOGGING_DIR", "WANDB_PROJECT"):  # tracking_args sets them
        monkeypatch.setenv(variable, "")
    names = {f.name for f in fields(config_class)}
    required = {"model_path": "m", "train_data": ["d"], "kind": "helpful", "data": "d"}
    config = config_class(output_dir=str(tmp_path / "out"), run_name="run/stage", project="p",
                          report_to=["tensorboard"], **{k: v for k, v in required.items() if k in names})
    computed = {}
    real = config_class.trainer_kwargs

    def recording(self, workflow_defaults, translated):
        computed.update(self.common_translated() | translated)
        return real(self, workflow_defaults, translated)

    monkeypatch.setattr(config_class, "trainer_kwargs", recording)
    args = module.trainer_arguments(config, *extra)
    assert set(computed) == set(config_class.TRANSLATED)
    for name in by_name_fields(config_class, trl_field_names(config_class)):
        assert getattr(args, name) == getattr(config, name), name


def stage_argv(shell: str, module: str) -> list[str]:
    """The stage's own arguments in a planned job's shell command."""
    words = shlex.split(shell.split(" > ", 1)[0])
    return words[words.index(module) + 1:]


def test_a_trl_only_knob_reaches_the_trainer_from_a_config_file(tmp_path, venv_env):
    """vllm_server_timeout has no key of its own: a config file sets it through trainer_args, and it
    arrives in the GRPOConfig the stage builds (and not without it: TRL's default is another). The base's
    chat_template reaches the SFT stage that starts from it (tests/test_chat_template.py: what it does there)."""
    from stages.grpo import trainer_arguments as grpo_arguments
    from stages.sft import trainer_arguments as sft_arguments

    tiny = yaml.safe_load((REPO / "configs" / "tiny.yaml").read_text())
    template = tmp_path / "chatml.jinja"
    template.write_text("{{ messages[0]['content'] }}")
    config = merged(tiny, {"reasoning_rl": {"trainer_args": {"vllm_server_timeout": 600, "warmup_steps": 3}},
                           "cold_start_sft": {"trainer_args": {"save_total_limit": 5}},
                           "base": {"chat_template": str(template)}})
    done = snakemake(tmp_path, write_config(tmp_path, config), "-n", "-p", "reasoning_rl", "--forceall",
                     env=venv_env)
    shells = {job["rule"]: job["shell"] for job in planned_job_details(done.stdout)}
    rl = parse_config(GRPOStageConfig, stage_argv(shells["reasoning_rl"], "stages.grpo"))
    args = grpo_arguments(rl, world_size=1, vllm_stop={})
    assert (args.vllm_server_timeout, args.warmup_steps) == (600, 3)
    assert args.learning_rate == tiny["reasoning_rl"]["learning_rate"]  # the stage's own keys still apply
    sft_config = parse_config(SFTStageConfig, stage_argv(shells["cold_start_sft"], "stages.sft"))
    assert sft_arguments(sft_config).save_total_limit == 5  # a workflow default, replaced
    assert sft_config.chat_template == str(template)
    plain = parse_config(GRPOStageConfig, ["--model_path", "m", "--train_data", "d", "--output_dir", str(tmp_path)])
    assert grpo_arguments(plain, world_size=1, vllm_stop={}).vllm_server_timeout != 600


@pytest.mark.parametrize("trainer_args, named", [
    ({"vllm_server_timout": 600}, "reasoning_rl.trainer_args.vllm_server_timout: not a field of TRL's GRPOConfig; "
                                  "did you mean 'vllm_server_timeout'?"),
    ({"learning_rate": 1e-6}, "reasoning_rl.trainer_args.learning_rate: the stage has its own key for it: "
                              "set reasoning_rl.learning_rate instead"),
    ({"per_device_train_batch_size": 4}, "derives it from reasoning_rl.questions_per_step"),
    ({"seed": 3}, "reasoning_rl.trainer_args.seed: set by the workflow from the config's top-level `seed`"),
])
def test_trainer_args_mistakes_are_named_before_any_job(trainer_args, named):
    config = yaml.safe_load((REPO / "configs" / "tiny.yaml").read_text())
    config["reasoning_rl"]["trainer_args"] = trainer_args
    assert named in "\n".join(cross_field_errors(config))


def test_trainer_args_mistakes_stop_the_stage_with_their_names(tmp_path):
    base = ["--model_path", "m", "--train_data", "d", "--output_dir", str(tmp_path)]
    config = parse_config(SFTStageConfig, [*base, "--trainer_args", '{"max_lenght": 64}'])
    with pytest.raises(ValueError, match="trainer_args.max_lenght: not a field of TRL's SFTConfig; did you mean "
                                         "'max_length'"):
        config.trainer_overrides()
    with pytest.raises(ValueError, match="not a JSON object"):
        parse_config(SFTStageConfig, [*base, "--trainer_args", "max_length=64"]).trainer_overrides()
    reward = RewardModelStageConfig(kind="helpful", model_path="m", data="d", output_dir=str(tmp_path),
                                    trainer_args='{"center_rewards_coefficient": 0.1}')
    with pytest.raises(ValueError, match="set --center_rewards_coefficient instead"):
        reward.trainer_overrides()
