"""Reward-model rewards for the final RL stage: the helpful model scores the final summary, the
harmless model the whole response, on general prompts only (rows without a gold `solution` or code `tests`);
reasoning prompts get None, so TRL leaves them to the rule rewards.

Scores are normalised so that they do not drown the rule rewards: z = (score - mean) / std with the
mean and standard deviation the reward model's own scores had on its held-out responses
(reward_stats.json), then squashed by a sigmoid into (0, 1), the range of accuracy and format.
"""

import json
import math
from pathlib import Path

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from stages.lib.rewards.code import is_code_row
from stages.lib.rewards.functions import RewardFunction, completion_text, rows_of
from stages.lib.rewards.registry import REWARDS, implementation_of
from stages.lib.templates import summary_of

# Written by the reward-model stage beside the model: the mean and spread of its held-out scores.
REWARD_STATS = "reward_stats.json"


@torch.no_grad()  # not inference_mode: a ZeRO-3 model's gathered parameters must stay ordinary tensors
def score_responses(model, tokenizer, prompts: list[str], responses: list[str], batch_size: int = 64,
                    max_length: int | None = None, keep_end: bool = False) -> list[float]:
    """One scalar per (prompt, response), with the chat template the model was trained on; a pair over
    `max_length` tokens is cut from the right, or with `keep_end` from the left, so that the end of the
    response (its conclusion, its summary) is always judged."""
    tokenizer.padding_side = "right"
    tokenizer.truncation_side = "left" if keep_end else "right"
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": p}, {"role": "assistant", "content": r}],
                                           tokenize=False) for p, r in zip(prompts, responses)]
    scores = []
    for start in range(0, len(texts), batch_size):
        batch = tokenizer(texts[start:start + batch_size], return_tensors="pt", padding=True,
                          truncation=max_length is not None, max_length=max_length,
                          add_special_tokens=False).to(model.device)
        scores += model(**batch).logits[:, 0].float().tolist()
    return scores


def prompt_text(prompt) -> str:
    """The user's request, from a raw prompt string or a conversation."""
    if isinstance(prompt, str):
        return prompt
    return next((m["content"] for m in reversed(prompt) if m["role"] == "user"), "")


class RewardModelReward(RewardFunction):
    def __init__(self, name: str, model_path: str, device: torch.device, batch_size: int = 32,
                 reasoning_prefill: str = ""):
        super().__init__(name, settings=None)
        self.reasoning_prefill = reasoning_prefill  # templates.reasoning_prefill: the summary starts after it closes
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.model = AutoModelForSequenceClassification.from_pretrained(model_path, dtype="auto").to(device).eval()
        stats = json.loads((Path(model_path) / REWARD_STATS).read_text())
        self.mean, self.std = stats["mean"], stats["std"] or 1.0
        # The window the model was trained with (a model from elsewhere: its context)
        self.max_length = stats.get("max_length") or getattr(self.model.config, "max_position_embeddings", None)
        self.judge_summary_only = REWARDS[name].judges == "summary"
        self.batch_size = batch_size

    def normalise(self, score: float) -> float:
        return 1.0 / (1.0 + math.exp(-(score - self.mean) / self.std))

    def __call__(self, prompts=None, completions=(), completion_ids=None, **columns):
        rows = rows_of(columns, len(completions))
        applicable = [i for i, row in enumerate(rows) if not row.get("solution") and not is_code_row(row)]
        responses = [completion_text(completions[i], self.reasoning_prefill) for i in applicable]
        if self.judge_summary_only:
            responses = [summary_of(response) for response in responses]
        raw = score_responses(self.model, self.tokenizer, [prompt_text(prompts[i]) for i in applicable], responses,
                              self.batch_size, max_length=self.max_length, keep_end=True)
        scores: list[float | None] = [None] * len(completions)
        for i, score in zip(applicable, raw):
            scores[i] = self.normalise(score)
        return scores


def build_model_rewards(model_paths: dict[str, str], device: torch.device,
                        reasoning_prefill: str = "") -> list[RewardModelReward]:
    """The reward-model rewards named (stages.lib.rewards.registry), each with its model, on `device`: in a
    multi-process run, each process's own GPU."""
    return [implementation_of(name)(name, path, device=device, reasoning_prefill=reasoning_prefill)
            for name, path in model_paths.items()]
