"""One interface for sampling completions, two backends: transformers `generate` (CPU, tiny) and
vLLM (GPU, real configs; imported only when chosen).

    generator = load_generator(model_path, backend="transformers")
    samples = generator.generate(prompts, SamplingSettings(num_samples=8))  # list[list[Sample]]
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class SamplingSettings:
    num_samples: int = 1
    temperature: float = 0.6  # the paper's evaluation setting
    top_p: float = 0.95
    max_new_tokens: int = 256
    seed: int = 0
    stop_strings: tuple[str, ...] = ()  # generation ends after any of these (kept in the text)


@dataclass(frozen=True)
class Sample:
    text: str
    num_tokens: int
    finished: bool  # False when cut at max_new_tokens


def load_generator(model_path: str, backend: str = "transformers", **backend_options):
    if backend == "transformers":
        from stages.generation.hf import TransformersGenerator

        return TransformersGenerator(model_path, **backend_options)
    if backend == "vllm":
        from stages.generation.vllm_backend import VLLMGenerator

        return VLLMGenerator(model_path, **backend_options)
    raise ValueError(f"unknown generation backend {backend!r}: expected 'transformers' or 'vllm'")
