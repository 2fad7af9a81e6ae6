"""Every reward a GRPO section may name, once: rule rewards score a completion against its row
(stages.lib.rewards.functions), reward-model rewards score it with a trained reward model
(stages.lib.rewards.model_rewards). The config schema's list of reward names is this table's keys; a section
may also name a reward of its own by `file.py:function` or `module:function` (stages.lib.rewards.external).
Torch-free: the workflow's config checks read it."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Reward:
    implementation: str  # module:class
    model_key: str = ""  # reward models: the GRPO stage key naming the model
    judges: str = ""  # reward models: `summary` (the final answer's summary) or `response` (all of it)


REWARDS = {
    "accuracy": Reward("stages.lib.rewards.functions:Accuracy"),
    "code": Reward("stages.lib.rewards.functions:Code"),
    "format": Reward("stages.lib.rewards.functions:Format"),
    "tag_count": Reward("stages.lib.rewards.functions:TagCount"),
    "language": Reward("stages.lib.rewards.functions:LanguageConsistency"),
    "overlong": Reward("stages.lib.rewards.functions:SoftOverlong"),
    # The paper's helpful model judges the summary only, its harmless model the whole response.
    "helpful_rm": Reward("stages.lib.rewards.model_rewards:RewardModelReward", "helpful_reward_model", "summary"),
    "harmless_rm": Reward("stages.lib.rewards.model_rewards:RewardModelReward", "harmless_reward_model", "response"),
}
RULE_REWARDS = tuple(name for name, reward in REWARDS.items() if not reward.model_key)
MODEL_REWARDS = tuple(name for name, reward in REWARDS.items() if reward.model_key)


def is_reference(entry: str) -> bool:
    """Whether a `rewards` entry names a function outside the registry (`where:function`)."""
    return ":" in entry


def reward_name(entry: str) -> str:
    """The name a reward logs under (rewards/<name>/mean): a registry name, or a reference's function."""
    return entry.rpartition(":")[2]


def weighted_rewards(rewards: list[str], weights: list[float]) -> str:
    """`accuracy 1, format 0.5`: each reward a stage used with its weight (model card, report)."""
    return ", ".join(f"{reward} {weight:g}" for reward, weight in zip(rewards, weights))


def implementation_of(name: str):
    """The class that computes a reward (imports its module: the model rewards' needs torch)."""
    import importlib

    module, _, class_name = REWARDS[name].implementation.partition(":")
    return getattr(importlib.import_module(module), class_name)
