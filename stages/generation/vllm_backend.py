"""vLLM backend for GPUs. Imported only when a config chooses it, so CPU installs never need vLLM."""

from stages.generation import Sample, SamplingSettings


class VLLMGenerator:
    def __init__(self, model_path: str, tensor_parallel_size: int = 1, gpu_memory_utilization: float = 0.9,
                 max_model_len: int | None = None, dtype: str = "auto"):
        from vllm import LLM  # noqa: PLC0415  GPU-only dependency

        self.llm = LLM(model=model_path, tensor_parallel_size=tensor_parallel_size,
                       gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len, dtype=dtype)
        self.tokenizer = self.llm.get_tokenizer()

    def generate(self, prompts: list[str], settings: SamplingSettings) -> list[list[Sample]]:
        from vllm import SamplingParams  # noqa: PLC0415

        params = SamplingParams(n=settings.num_samples, temperature=settings.temperature, top_p=settings.top_p,
                                max_tokens=settings.max_new_tokens, seed=settings.seed,
                                stop=list(settings.stop_strings), include_stop_str_in_output=True)
        results = self.llm.generate(prompts, params)
        return [[Sample(out.text, len(out.token_ids), out.finish_reason == "stop") for out in result.outputs]
                for result in results]
