import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from stages.lib.stop_tokens import stop_token_ids
from stages.lib.templates import CHAT, R1_ZERO, THINK_TAGS
from stages.lib.tokenizer import CHAT_TEMPLATE, chat_template_renderer

TEXT = "<think> 12 + 7 = 19. 19 加 3 等于 22. </think> <answer> 22 </answer>"


def test_tokenizer_round_trips_text_tags_and_chinese(tiny_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    ids = tokenizer(TEXT, add_special_tokens=False).input_ids
    assert tokenizer.decode(ids) == TEXT
    # GRPO decodes with skip_special_tokens=True: the tags must survive it.
    assert tokenizer.decode(ids, skip_special_tokens=True) == TEXT


def test_tags_are_single_tokens_and_digits_are_split(tiny_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    for tag in THINK_TAGS:
        assert len(tokenizer(tag, add_special_tokens=False).input_ids) == 1, tag
    assert tokenizer.tokenize("12345") == ["1", "2", "3", "4", "5"]


def test_chat_template_matches_the_renderer_used_for_the_corpus(tiny_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    messages = [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Hello."}]
    assert tokenizer.chat_template == CHAT_TEMPLATE
    assert tokenizer.apply_chat_template(messages, tokenize=False) == chat_template_renderer()(messages)
    prompt = CHAT.render("What is 2 + 2?", tokenizer)
    assert prompt.startswith("<|im_start|>user\nWhat is 2 + 2?") and prompt.endswith("<|im_start|>assistant\n")


def test_r1_zero_prompt_is_the_papers_template():
    prompt = R1_ZERO.prompt("How many?")
    assert prompt.startswith("A conversation between User and Assistant.")
    assert prompt.endswith("User: How many? Assistant:")


def test_model_saves_and_loads_through_the_auto_classes(tiny_model_dir, tmp_path):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert model.config.model_type == "qwen2"
    assert model.config.vocab_size == len(tokenizer)
    model.save_pretrained(tmp_path)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    ids = torch.tensor([tokenizer(TEXT).input_ids])
    assert torch.equal(model(ids).logits, reloaded(ids).logits)
    assert set(stop_token_ids(tokenizer)) == {tokenizer.eos_token_id, tokenizer.pad_token_id}


def test_pretraining_wrote_curve_and_manifest(tiny_model_dir):
    import json

    manifest = json.loads((tiny_model_dir / "manifest.json").read_text())
    assert manifest["stage"] == "base"
    assert manifest["inputs"]["corpus"]["sha256"]
    assert manifest["metrics"]["parameters"] > 0
    losses = [json.loads(line)["loss"] for line in (tiny_model_dir / "metrics.jsonl").open() if '"loss"' in line]
    assert len(losses) >= 2 and losses[-1] < losses[0]
