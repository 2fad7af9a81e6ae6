"""Malformed data sets a user can feed the stages: each fails with a message naming the file, the
row or column, and the problem, before anything is trained on it."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stages import evaluate, grpo, rejection_sampling, reward_model, sft
from stages.lib.data.schema import SCHEMAS


def _reasoning(path, rows):
    full = [{"id": f"r{i}", "level": 1, "domain": "math", "worked_solution": "", **row} for i, row in enumerate(rows)]
    pq.write_table(pa.Table.from_pylist(full, schema=SCHEMAS["reasoning"]), path)
    return str(path)


def grpo_without_a_gold_answer(tmp, model):
    data = _reasoning(tmp / "rl.parquet", [{"prompt": "1 + 1?", "solution": "2"},
                                           {"prompt": "2 + 2?", "solution": ""}])
    grpo.main(["--model_path", model, "--train_data", data, "--output_dir", str(tmp / "out"), "--max_steps", "1",
               "--num_generations", "2", "--questions_per_step", "1", "--max_completion_length", "4"])


def sft_conversation_without_an_answer(tmp, model):
    rows = [{"id": "ok", "domain": "math", "messages": [{"role": "user", "content": "q"},
                                                        {"role": "assistant", "content": "a"}]},
            {"id": "cut", "domain": "math", "messages": [{"role": "user", "content": "q"}]}]
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMAS["sft"]), tmp / "cold.parquet")
    sft.main(["--model_path", model, "--train_data", str(tmp / "cold.parquet"), "--output_dir", str(tmp / "out"),
              "--max_steps", "1"])


def preferences_without_rejected(tmp, model):
    pq.write_table(pa.table({"id": ["p"], "prompt": ["q"], "chosen": ["a"], "domain": ["qa"], "split": ["train"]}),
                   tmp / "prefs.parquet")
    reward_model.main(["--kind", "helpful", "--model_path", model, "--data", str(tmp / "prefs.parquet"),
                       "--output_dir", str(tmp / "out")])


def evaluation_row_without_a_gold_answer(tmp, model):
    data = _reasoning(tmp / "eval.parquet", [{"prompt": "1 + 1?", "solution": "2"},
                                             {"prompt": "3 + 4?", "solution": " "}])
    evaluate.main(["--model_path", model, "--eval_sets", f"math={data}", "--output_dir", str(tmp / "out"),
                   "--num_samples", "1", "--max_new_tokens", "4"])


def generation_shard_with_a_broken_line(tmp, model):
    good = {"id": "a", "sample": 0, "prompt": "1 + 1?", "solution": "2", "domain": "math", "completion": "x"}
    (tmp / "shard-0.jsonl").write_text(json.dumps(good) + "\n" + '{"id": "b", "sample": 0, "prom\n')
    pq.write_table(pa.Table.from_pylist([], schema=SCHEMAS["general"]), tmp / "general.parquet")
    rejection_sampling.main(["--shards", str(tmp / "shard-0.jsonl"), "--general_data", str(tmp / "general.parquet"),
                    "--targets", "math=1", "--output_dir", str(tmp / "out")])


@pytest.mark.parametrize("feed, message", [
    (grpo_without_a_gold_answer, r"rl\.parquet: row 1 \(id 'r1'\): no gold answer \(solution\) and no tests"),
    (sft_conversation_without_an_answer, r"cold\.parquet: row 1 \(id 'cut'\) does not end with a non-empty assistant"),
    (preferences_without_rejected, r"prefs\.parquet: not a 'preference' data set, missing column\(s\) \['rejected'\]"),
    (evaluation_row_without_a_gold_answer, r"evaluation set math \(.*eval\.parquet\): row 1: no gold answer"),
    (generation_shard_with_a_broken_line, r"shard-0\.jsonl:2: not JSON"),
])
def test_a_malformed_data_set_is_named_before_training(feed, message, tiny_model_dir, tmp_path):
    with pytest.raises(ValueError, match=message):
        feed(tmp_path, str(tiny_model_dir))
    assert not (tmp_path / "out").exists()
