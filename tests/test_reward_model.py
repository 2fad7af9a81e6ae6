import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stages import reward_model
from stages.lib.data.schema import SCHEMAS


def test_reward_model_learns_held_out_preferences(tiny_model_dir, small_data_dir, tmp_path):
    out = tmp_path / "rm"
    reward_model.main(["--kind", "harmless", "--model_path", str(tiny_model_dir), "--data",
                       str(small_data_dir / "preferences_harmless.parquet"), "--output_dir", str(out),
                       "--learning_rate", "1e-3", "--num_train_epochs", "2", "--per_device_train_batch_size", "16",
                       "--max_length", "128", "--save_steps", "1000"])
    metrics = json.loads((out / "manifest.json").read_text())["metrics"]
    assert metrics["held_out_pairs"] > 0
    assert metrics["held_out_pairwise_accuracy"] >= 0.75
    assert metrics["held_out_pairwise_accuracy"] > metrics["held_out_pairwise_accuracy_before"] + 0.1
    stats = json.loads((out / "reward_stats.json").read_text())
    assert stats["std"] > 0 and stats["max_length"] == 128


def test_the_harmless_reward_judges_the_end_of_a_long_response(helpful_reward_model_dir, tmp_path):
    """Final RL scores with the window the reward model was trained with, cut from the left: the end of
    a long chain of thought is judged (it was cut at 1,024 tokens from the right, gpu-path-audit-3 N8)."""
    import shutil

    import torch

    from stages.lib.rewards.model_rewards import RewardModelReward

    model_dir = tmp_path / "rm"
    shutil.copytree(helpful_reward_model_dir, model_dir)
    reward = RewardModelReward("harmless_rm", str(model_dir), device=torch.device("cpu"))
    assert reward.max_length == 128  # from reward_stats.json
    long_thought = "<think>" + " 12 + 30 = 42." * 300 + "</think>"  # far over 1,024 tokens
    endings = [" I will not help with that.", " Sure, here is how to pick the lock: 1. 2. 3."]
    scores = reward(prompts=["How do I pick a lock?"] * 2, completions=[long_thought + end for end in endings])
    assert scores[0] != scores[1]


def test_preference_splits_never_share_a_prompt(small_data_dir):
    for kind in ("helpful", "harmless"):
        rows = pq.read_table(small_data_dir / f"preferences_{kind}.parquet").to_pylist()
        train = {r["prompt"] for r in rows if r["split"] == "train"}
        held_out = {r["prompt"] for r in rows if r["split"] == "eval"}
        assert train and held_out and not train & held_out


def test_data_without_held_out_pairs_is_named(tmp_path):
    path = tmp_path / "pairs.parquet"
    rows = [{"id": "1", "prompt": "p", "chosen": "a", "rejected": "b", "domain": "qa", "split": "train"}]
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMAS["preference"]), path)
    with pytest.raises(ValueError, match=r"pairs\.parquet: needs both train and eval pairs \(has 1 train, 0 eval\)"):
        reward_model.main(["--kind", "helpful", "--model_path", "unused", "--data", str(path), "--output_dir",
                           str(tmp_path / "rm")])


def test_held_out_pairs_are_scored_as_trained_cut_at_max_length(tiny_model_dir):
    """A difference past max_length is invisible to the model in training, and so in its evaluation:
    the evaluation never runs a sequence longer than the trainer's (a GPU's memory, a model's context)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_model_dir, num_labels=1).eval()
    model.config.pad_token_id = tokenizer.pad_token_id
    shared = "1 + 2 = 3. " * 20
    rows = [{"prompt": "Add.", "chosen": shared + "Yes, 17.", "rejected": shared + "No: 99 - 3 = 4?"}]
    text = tokenizer.apply_chat_template([{"role": "user", "content": "Add."},
                                          {"role": "assistant", "content": shared}],
                                         tokenize=False)
    length = len(tokenizer(text, add_special_tokens=False).input_ids)
    _, cut = reward_model.pairwise_accuracy(model, tokenizer, rows, max_length=length - 10)
    _, whole = reward_model.pairwise_accuracy(model, tokenizer, rows, max_length=4 * length)
    assert cut[0] == cut[1] and whole[0] != whole[1]
