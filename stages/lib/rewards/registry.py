"""Every reward a GRPO section may name, once: rule rewards score a completion against its row
(stages.lib.rewards.functions), reward-model rewards score it with a trained reward model
(stages.lib.rewards.model_rewards). The config schema's list of reward names is this table's keys.
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


def implementation_of(name: str):
    """The class that computes a reward (imports its module: the model rewards' needs torch)."""
    import importlib

    module, _, class_name = REWARDS[name].implementation.partition(":")
    return getattr(importlib.import_module(module), class_name)
