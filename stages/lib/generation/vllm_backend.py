"""vLLM backend for GPUs. Imported only when a config chooses it, so CPU installs never need vLLM."""

import hashlib

from stages.lib.generation import ContextBoundGenerator, Sample, SamplingSettings, clamp_to_context, model_context
from stages.lib.stop_tokens import stop_token_ids


def sampling_params(settings: SamplingSettings, tokenizer, seed: int) -> dict:
    """vLLM's SamplingParams fields for one prompt. The end-of-turn and end-of-text ids are passed
    explicitly: vLLM otherwise stops only at the tokenizer's eos and generation_config.json's, and a
    Qwen base tokenizer's eos is not the <|im_end|> its fine-tuned models end turns with."""
    return {"n": settings.num_samples, "temperature": settings.temperature, "top_p": settings.top_p,
            "max_tokens": settings.max_new_tokens, "seed": seed, "stop": list(settings.stop_strings),
            "include_stop_str_in_output": True, "stop_token_ids": stop_token_ids(tokenizer)}


def prompt_seeds(seed: int, count: int) -> list[int]:
    """One seed per prompt of a call, drawn from the call's seed. vLLM seeds sample j of a request with
    seed + j: one seed for the whole call would give sample j of every prompt the same random stream."""
    return [int.from_bytes(hashlib.blake2b(f"{seed}:{index}".encode(), digest_size=6).digest(), "big")
            for index in range(count)]


def token_prompts(tokenizer, prompts: list[str]) -> list[dict]:
    """Prompts as token ids, tokenized as the transformers backend does: vLLM would add the tokenizer's
    special tokens to a text prompt, and a chat template that already starts with BOS would get two
    (Llama students)."""
    return [{"prompt_token_ids": ids} for ids in tokenizer(prompts, add_special_tokens=False).input_ids]


class VLLMGenerator(ContextBoundGenerator):
    def __init__(self, model_path: str, tensor_parallel_size: int = 1, gpu_memory_utilization: float = 0.9,
                 max_model_len: int | None = None, dtype: str = "auto"):
        from vllm import LLM  # GPU-only dependency

        # vLLM refuses a max_model_len above the model's, and a whole call for one prompt that long.
        self.context = clamp_to_context(max_model_len, model_context(model_path))
        self.llm = LLM(model=model_path, tensor_parallel_size=tensor_parallel_size,
                       gpu_memory_utilization=gpu_memory_utilization, max_model_len=self.context, dtype=dtype)
        self.tokenizer = self.llm.get_tokenizer()

    def _generate(self, prompts: list[str], settings: SamplingSettings, on_progress=None) -> list[list[Sample]]:
        from vllm import SamplingParams

        results = self.llm.generate(token_prompts(self.tokenizer, prompts),
                                    [SamplingParams(**sampling_params(settings, self.tokenizer, seed))
                                     for seed in prompt_seeds(settings.seed, len(prompts))])
        return [[Sample(out.text, len(out.token_ids), out.finish_reason == "stop") for out in result.outputs]
                for result in results]
