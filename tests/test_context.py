"""A model whose context is shorter than the config asks: lengths are clamped to the model's, and a
prompt that leaves no room to generate is counted and scored as wrong, not a crash of the call."""

import shutil

from transformers import AutoConfig, AutoTokenizer

from stages.lib.generation import SamplingSettings, clamp_to_context, load_generator, model_context


def test_max_model_len_is_clamped_to_the_model_context(tiny_model_dir):
    context = model_context(str(tiny_model_dir))
    assert context == AutoConfig.from_pretrained(tiny_model_dir).max_position_embeddings
    assert clamp_to_context(10_240, context) == context
    assert clamp_to_context(context // 2, context) == context // 2
    assert clamp_to_context(None, context) == context


def test_a_prompt_longer_than_the_context_is_dropped_and_counted(tiny_model_dir, tmp_path):
    short_model = tmp_path / "short"
    shutil.copytree(tiny_model_dir, short_model)
    config = AutoConfig.from_pretrained(short_model)
    config.max_position_embeddings = 48
    config.save_pretrained(short_model)
    tokenizer = AutoTokenizer.from_pretrained(short_model)
    short, long = "What is 2 + 3?", "What is " + " + ".join(["2"] * 40) + "?"
    assert len(tokenizer(long).input_ids) >= 48 > len(tokenizer(short).input_ids) + 8

    generator = load_generator(str(short_model), "transformers", batch_size=4)
    samples = generator.generate([short, long, short], SamplingSettings(num_samples=2, max_new_tokens=200))
    assert [len(s) for s in samples] == [2, 2, 2]
    assert all(sample.text == "" and not sample.finished for sample in samples[1])
    assert generator.overlong_prompts == 1
    room = 48 - len(tokenizer(short).input_ids)
    assert all(sample.num_tokens <= room for sample in samples[0] + samples[2])
