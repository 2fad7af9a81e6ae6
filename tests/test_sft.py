import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from transformers import AutoModelForCausalLM

from stages import sft
from stages.lib.data.schema import SCHEMAS
from tests.conftest import SMALL_DATA, run_card_snippet


def test_sft_lowers_the_loss_on_cold_start_data(tiny_model_dir, small_data_dir, tmp_path, capsys, monkeypatch):
    out = tmp_path / "dev1"
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", "")  # the stage sets it: restored after the test
    sft.main(["--report_to", "tensorboard", "--tensorboard_dir", str(tmp_path / "tensorboard"),
              "--run_name", "tiny/cold_start_sft", "--model_path", str(tiny_model_dir),
              "--train_data", str(small_data_dir / "cold_start.parquet"),
              "--output_dir", str(out), "--stage", "cold_start_sft", "--learning_rate", "3e-3",
              "--num_train_epochs", "3", "--per_device_train_batch_size", "16", "--max_length", "256",
              "--logging_steps", "2", "--save_steps", "1000"])
    losses = [row["loss"] for row in map(json.loads, (out / "metrics.jsonl").open()) if "loss" in row]
    assert len(losses) >= 5
    # the log reads as progress: one line per logging step with step N/M, elapsed, ETA and the loss
    progress = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step ")]
    assert len(progress) == len(losses)
    assert re.fullmatch(r"step 2/\d+ \(\d+%\) \| \d+:\d\d:\d\d elapsed, ETA \d+:\d\d:\d\d "
                        r"\| loss [\d.]+ \| lr [\d.e+-]+",
                        progress[0]), progress[0]
    assert losses[-1] < 0.7 * losses[0]
    # report_to tensorboard: TensorBoard's own reader loads the event files, one loss per logging step
    events = EventAccumulator(str(tmp_path / "tensorboard")).Reload()
    assert [round(event.value, 4) for event in events.Scalars("train/loss")] == [round(loss, 4) for loss in losses]
    manifest = json.loads((out / "manifest.json").read_text())
    examples = SMALL_DATA["num_cold_start"] + SMALL_DATA["num_cold_start_code"]
    assert manifest["stage"] == "cold_start_sft" and manifest["metrics"]["examples"] == examples
    AutoModelForCausalLM.from_pretrained(out)
    # the published directory carries a model card made from the manifest
    card = (out / "README.md").read_text()
    assert card.startswith("# Dev1 (cold-start SFT)") and str(tiny_model_dir) in card
    assert "- learning_rate: 0.003" in card
    # its snippet runs as written (from anywhere: the card names the model by its path)
    run_card_snippet(card, tmp_path)


def test_loss_falls_on_the_assistant_answer_only(tiny_model_dir, tmp_path):
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    examples = sft.to_prompt_completion([{"id": "x", "messages": [
        {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "content": "<think>\n2 + 2 = 4\n</think>\n\n\\boxed{4}"}]}],
        "inline")
    trainer = SFTTrainer(model=str(tiny_model_dir), processing_class=tokenizer,
                         train_dataset=Dataset.from_list(examples),
                         args=SFTConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to=[]))
    row = trainer.train_dataset[0]
    masked = [label for label in row["labels"] if label != -100]
    assert tokenizer.decode(masked).startswith("<think>\n2 + 2 = 4")
    assert "What is 2 + 2?" not in tokenizer.decode(masked)


def test_a_conversation_without_an_assistant_answer_is_named(tmp_path):
    path = tmp_path / "bad.parquet"
    rows = [{"id": "ok", "domain": "math", "messages": [{"role": "user", "content": "q"},
                                                        {"role": "assistant", "content": "a"}]},
            {"id": "broken", "domain": "math", "messages": [{"role": "user", "content": "q"}]}]
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMAS["sft"]), path)
    with pytest.raises(ValueError, match=r"bad\.parquet: row 1 \(id 'broken'\)"):
        sft.load_conversations([str(path)])


def test_a_file_without_examples_is_named(tmp_path):
    path = tmp_path / "mixture.parquet"
    pq.write_table(pa.Table.from_pylist([], schema=SCHEMAS["sft"]), path)
    with pytest.raises(ValueError, match=r"mixture\.parquet: no examples to train on"):
        sft.load_conversations([str(path)])


def test_examples_longer_than_max_length_are_left_out_not_cut_and_a_remnant_is_refused(tiny_model_dir, small_data_dir,
                                                                                        tmp_path):
    """A cut trace would teach a reasoning block that never closes (gpu-path-audit-3, N9); a cold start trained on
    the few traces that fit would carry into every later stage (real-ids-audit-4: OpenR1's run to ~16K tokens)."""
    from transformers import AutoConfig, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    dataset = sft.load_conversations([str(small_data_dir / "cold_start.parquet")])
    lengths = [len(tokenizer.apply_chat_template(row["prompt"] + row["completion"])["input_ids"]) for row in dataset]
    limit = sorted(lengths)[len(lengths) // 2]
    fitting = sum(n <= limit for n in lengths)
    out = tmp_path / "dev1"
    argv = ["--model_path", str(tiny_model_dir), "--train_data", str(small_data_dir / "cold_start.parquet"),
            "--output_dir", str(out), "--stage", "cold_start_sft", "--max_steps", "1",
            "--per_device_train_batch_size", "4", "--max_length", str(limit), "--save_steps", "1000"]
    shortfall = (rf"{fitting} of {len(lengths)} examples fit max_length={limit} tokens \({len(lengths) - fitting} "
                 rf"are longer\), short of the {len(lengths)} asked")
    with pytest.raises(ValueError, match=shortfall):
        sft.main(argv)
    assert not out.exists()
    sft.main(argv + ["--max_examples", str(fitting - 1), "--extend_context_to", "512"])  # selects from a pool
    metrics = json.loads((out / "manifest.json").read_text())["metrics"]
    assert metrics["examples_over_max_length"] == len(lengths) - fitting > 0
    assert (metrics["examples"], metrics["examples_read"]) == (fitting - 1, len(lengths))
    assert AutoConfig.from_pretrained(out).max_position_embeddings == 512
    assert AutoTokenizer.from_pretrained(out).model_max_length == 512


def test_the_readme_shows_the_model_cards_snippet():
    """The README's "Using a trained model" block is the chat models' card snippet (which test_sft runs)."""
    from stages.lib.model_card import usage_snippet
    from stages.lib.templates import CHAT

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    block = readme.split("## Using a trained model", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    assert block == usage_snippet("results/tiny/final_rl", CHAT)
