"""Chat turns stop with a Qwen-style tokenizer (eos <|endoftext|>, turns ending in <|im_end|>), on
every path that samples: the saved model's generation config (what vLLM reads), the vLLM backend's
sampling parameters, GRPO's vLLM generation settings, and the transformers backend; and vLLM gets its
prompts tokenized as the transformers backend tokenizes them."""

import json

import pytest
from transformers import AutoTokenizer

from stages import sft
from stages.grpo import stop_settings
from stages.lib.generation import SamplingSettings
from stages.lib.generation.vllm_backend import sampling_params, token_prompts
from stages.lib.stop_tokens import END_OF_TEXT, IM_END, stop_token_ids
from stages.lib.templates import CHAT, R1_ZERO


def end_ids(tokenizer) -> set[int]:
    return {tokenizer.convert_tokens_to_ids(IM_END), tokenizer.convert_tokens_to_ids(END_OF_TEXT)}


def test_a_qwen_base_tokenizer_stops_at_the_end_of_a_turn(qwen_style_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(qwen_style_model_dir)
    assert tokenizer.eos_token == END_OF_TEXT
    assert set(stop_token_ids(tokenizer)) == end_ids(tokenizer)


def test_vllm_sampling_and_grpo_on_vllm_pass_the_stop_ids(qwen_style_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(qwen_style_model_dir)
    params = sampling_params(SamplingSettings(num_samples=4, max_new_tokens=32, stop_strings=("</answer>",)),
                             tokenizer, seed=7)
    assert set(params["stop_token_ids"]) == end_ids(tokenizer)
    assert params["stop"] == ["</answer>"] and params["n"] == 4 and params["max_tokens"] == 32
    _, vllm_stop = stop_settings(tokenizer, CHAT, use_vllm=True)
    assert set(vllm_stop["stop_token_ids"]) == end_ids(tokenizer)


def test_a_model_fine_tuned_from_a_qwen_base_names_its_stop_tokens(qwen_style_model_dir, small_data_dir, tmp_path):
    base_config = json.loads((qwen_style_model_dir / "generation_config.json").read_text())
    assert base_config["eos_token_id"] == AutoTokenizer.from_pretrained(qwen_style_model_dir).eos_token_id
    out = tmp_path / "dev1"
    sft.main(["--model_path", str(qwen_style_model_dir), "--train_data", str(small_data_dir / "cold_start.parquet"),
              "--output_dir", str(out), "--stage", "cold_start_sft", "--max_steps", "1",
              "--per_device_train_batch_size", "4", "--max_length", "128", "--max_examples", "8",
              "--save_steps", "1000"])  # the first 8 of the conversations that fit 128 of its tokens
    saved = json.loads((out / "generation_config.json").read_text())
    assert set(saved["eos_token_id"]) == end_ids(AutoTokenizer.from_pretrained(out))


def multi_token_tags_tokenizer(directory):
    """A byte-level BPE tokenizer whose vocabulary lacks the template tags, as Qwen2.5's does: `</answer>`
    is several tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from stages.lib.tokenizer import IM_START

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=[END_OF_TEXT, IM_START, IM_END], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(["What is 2 + 3? <think> 2 + 3 = 5 </think> <answer> 5 </answer>"] * 20, trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token=END_OF_TEXT, pad_token=END_OF_TEXT,
                                        additional_special_tokens=[IM_START, IM_END])
    tokenizer.save_pretrained(directory)
    return tokenizer


def test_r1_zero_on_vllm_refuses_masking_completions_that_stopped_at_a_multi_token_tag(tmp_path, small_data_dir):
    from stages import grpo

    tokenizer = multi_token_tags_tokenizer(tmp_path / "model")
    assert len(tokenizer("</answer>", add_special_tokens=False).input_ids) > 1
    ids, vllm_stop = stop_settings(tokenizer, R1_ZERO, use_vllm=True)
    assert ids == [] and vllm_stop["stop"] == ["</answer>"] and vllm_stop["include_stop_str_in_output"]
    with pytest.raises(ValueError, match=r"mask_truncated_completions: .* span several tokens"):
        grpo.main(["--stage", "r1_zero", "--template", "r1_zero", "--model_path", str(tmp_path / "model"),
                   "--train_data", str(small_data_dir / "rl_prompts.parquet"), "--output_dir", str(tmp_path / "out"),
                   "--use_vllm", "true", "--mask_truncated_completions", "true"])


def test_vllm_gets_the_prompts_tokenized_as_the_transformers_backend_does(qwen_style_model_dir):
    """No special tokens added to a rendered prompt: a BOS-adding tokenizer would get a second BOS."""
    from tokenizers import processors

    tokenizer = AutoTokenizer.from_pretrained(qwen_style_model_dir)
    bos = tokenizer.convert_tokens_to_ids(IM_END)  # stands in for Llama's <|begin_of_text|>
    tokenizer._tokenizer.post_processor = processors.TemplateProcessing(single=f"{IM_END} $A",
                                                                        special_tokens=[(IM_END, bos)])
    prompt = f"{IM_END}user: What is 2 + 3?"  # a chat template that writes the BOS itself
    assert tokenizer(prompt).input_ids[:2] == [bos, bos]  # what vLLM would do with the text
    (tokens,) = token_prompts(tokenizer, [prompt])
    assert tokens["prompt_token_ids"][:2] != [bos, bos] and tokens["prompt_token_ids"][0] == bos
