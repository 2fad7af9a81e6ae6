"""The stage table (stages/lib/recipe.py) is the one list of stages: the schema's stage lists, the rules and
the modules agree with it, and names of outputs resolve to their stage."""

import importlib.util
import re

import pytest
import yaml

from stages.lib.config_checks import SCHEMA, load_schema, schema_errors
from stages.lib.recipe import (
    STAGES,
    Stage,
    brought,
    compared_with,
    label_of,
    required_sections,
    stage_of,
    stages_of_kind,
    template_of,
)
from stages.lib.rewards.registry import REWARDS
from stages.lib.templates import TEMPLATES
from tests.snakemake_helpers import REPO

SCHEMA_TEXT = yaml.safe_load(SCHEMA.read_text())
RULES = {name for path in (REPO / "rules").glob("*.smk")
         for name in re.findall(r"^\s*rule (\w+):", path.read_text(), re.M)}


def test_the_schema_file_types_no_list_of_stages_or_rewards():
    """They are filled when the schema is loaded: the stage table and the reward registry are the one list each."""
    properties = SCHEMA_TEXT["properties"]
    assert properties["start_from"]["propertyNames"]["enum"] == []
    assert properties["compute"]["properties"] == {}
    assert properties["evaluation"]["properties"]["models"]["items"]["anyOf"][0]["enum"] == []
    assert SCHEMA_TEXT["$defs"]["grpo"]["properties"]["rewards"]["items"]["anyOf"][0]["enum"] == []
    assert not set(SCHEMA_TEXT["required"]) & {stage.settings.partition(".")[0] for stage in STAGES.values()}


def test_the_loaded_schema_s_lists_are_the_recipe_s():
    properties = load_schema()["properties"]
    assert set(properties["start_from"]["propertyNames"]["enum"]) == set(brought())
    assert brought()["rejection_sampling"] == "mixture" and brought()["reward_model_harmless"] == "reward_model"
    assert set(properties["compute"]["properties"]) == {stage.compute for stage in STAGES.values()} | \
        {"default", "evaluate"}
    (named, pattern) = properties["evaluation"]["properties"]["models"]["items"]["anyOf"]
    assert named["enum"] == ["base", "r1_zero", "cold_start_sft", "reasoning_rl", "mixture_sft", "final_rl"]
    for name in ("distill", "student"):
        assert re.fullmatch(pattern["pattern"], STAGES[name].output.format(student="small"))
    assert load_schema()["$defs"]["grpo"]["properties"]["rewards"]["items"]["anyOf"][0]["enum"] == list(REWARDS)


SHIPPED = sorted(path.stem for path in (REPO / "configs").glob("*.yaml") if path.stem != "schema")


@pytest.mark.parametrize("config_name", SHIPPED)
def test_a_shipped_config_without_a_stage_s_section_fails_naming_it(config_name):
    config = yaml.safe_load((REPO / "configs" / f"{config_name}.yaml").read_text())
    assert schema_errors(config) == []
    for section in required_sections():
        assert schema_errors({k: v for k, v in config.items() if k != section}) == [
            f"{section}: missing (required; configs/tiny.yaml shows one)"]


def test_a_new_stage_is_required_in_every_config_and_reaches_the_schema_s_lists(monkeypatch):
    """The review's experiment: a GRPO stage added to the table, and the 1.5B config has no section for it.
    It must not validate (it would run on GRPO's paper defaults as a CPU job)."""
    monkeypatch.setitem(STAGES, "safety_rl", Stage("safety_rl", "R1 (safety)", "R1 after safety RL", "stages.grpo",
                                                   "grpo", "safety_rl", compared_with="final_rl", launchable=True,
                                                   brought_as="policy"))
    config = yaml.safe_load((REPO / "configs" / "qwen2.5-1.5b.yaml").read_text())
    assert schema_errors(config) == ["safety_rl: missing (required; configs/tiny.yaml shows one)"]
    properties = load_schema()["properties"]
    assert "safety_rl" in properties["compute"]["properties"]
    assert "safety_rl" in properties["start_from"]["propertyNames"]["enum"]
    assert "safety_rl" in properties["evaluation"]["properties"]["models"]["items"]["anyOf"][0]["enum"]


def test_each_training_section_is_its_stage_s_kind():
    properties = SCHEMA_TEXT["properties"]
    grpo = {name for name, spec in properties.items() if spec.get("$ref") == "#/$defs/grpo"}
    assert grpo == set(stages_of_kind("grpo"))
    sft = {name for name, spec in properties.items() if "sft" in spec.get("$ref", "")}
    assert sft | {"distill"} == set(stages_of_kind("sft"))  # distillation's settings are distill.sft


@pytest.mark.parametrize("config_name", ["tiny", "paper"])
def test_each_stage_s_settings_are_where_the_table_says(config_name):
    """One name per stage: its settings are its own section unless the table names another place, and
    every section of the config is some stage's (or the run's own)."""
    config = yaml.safe_load((REPO / "configs" / f"{config_name}.yaml").read_text())
    students = config["distill"]["students"]
    for stage in STAGES.values():
        for kind in ("helpful", "harmless"):
            for student in students:
                node = config
                for key in stage.settings.format(kind=kind, student=student).split("."):
                    assert isinstance(node, dict) and key in node, f"{stage.name}: no {stage.settings}"
                    node = node[key]
    run_sections = {"run_name", "results_dir", "seed", "tracking", "data", "evaluation", "compute", "containers",
                    "start_from"}
    assert set(config) - run_sections <= {stage.settings.partition(".")[0] for stage in STAGES.values()}
    assert [stage.name for stage in STAGES.values() if stage.settings != stage.name] == \
        ["student", "cold_start_samples", "generate", "reward_model", "distill"]


@pytest.mark.parametrize("name", STAGES)
def test_every_stage_has_its_rule_module_and_template(name):
    stage = STAGES[name]
    assert stage.rule in RULES, f"no rule {stage.rule} in rules/"
    assert importlib.util.find_spec(stage.module) is not None
    makes_a_policy = stage.kind in ("pretraining", "grpo", "sft")
    assert stage.template in TEMPLATES if makes_a_policy else stage.template == ""


def test_output_folders_resolve_to_their_stage():
    assert stage_of("distill_small") == (STAGES["distill"], {"student": "small"})
    assert label_of("distill_small") == "Distilled small" and label_of("reward_model_helpful") == \
        "Helpful reward model"
    assert label_of("student_small") == "Student small (undistilled)" and label_of("my_model") == "my_model"
    assert template_of("student_small") == template_of("r1_zero") == "r1_zero"
    assert template_of("final_rl") == template_of("distill_small") == "chat"
    assert compared_with("distill_small") == "student_small" and compared_with("base") is None
    with pytest.raises(KeyError, match="no stage's output"):
        stage_of("distill_")
