"""One interface for sampling completions, two backends: transformers `generate` (CPU, tiny) and
vLLM (GPU, real configs; imported only when chosen).

    generator = load_generator(model_path, backend="transformers")
    samples = generator.generate(prompts, SamplingSettings(num_samples=8))  # list[list[Sample]]
"""

import time
from dataclasses import dataclass, field

from stages.lib.artifacts import duration
from stages.lib.templates import reasoning_prefill


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


@dataclass(kw_only=True)
class BackendOptions:
    """How a stage that samples (generation shards, evaluation) runs its backend: one set of flags."""

    backend: str = field(default="transformers", metadata={"help": "transformers (CPU or GPU) or vllm (GPU)."})
    batch_size: int = field(default=64, metadata={"help": "Sequences per generate call (transformers backend)."})
    vllm_tensor_parallel_size: int = field(default=1, metadata={"help": "GPUs one vLLM engine spans."})
    vllm_gpu_memory_utilization: float = field(default=0.9)
    vllm_max_model_len: int = field(default=0, metadata={"help": "Context vLLM reserves (0: the model's)."})

    def backend_kwargs(self) -> dict:
        if self.backend == "vllm":
            return {"tensor_parallel_size": self.vllm_tensor_parallel_size,
                    "gpu_memory_utilization": self.vllm_gpu_memory_utilization,
                    "max_model_len": self.vllm_max_model_len or None}
        return {"batch_size": self.batch_size}


def model_context(model_path: str) -> int | None:
    """The longest sequence the model is built for (its config's max_position_embeddings)."""
    from transformers import AutoConfig

    return getattr(AutoConfig.from_pretrained(model_path), "max_position_embeddings", None)


def clamp_to_context(requested: int | None, context: int | None) -> int | None:
    """A context length no longer than the model's: a config asks for one length for every model it
    evaluates (vLLM refuses a max_model_len above the model's)."""
    if requested and context and requested > context:
        print(f"max_model_len {requested} is longer than the model's context: using {context}", flush=True)
        return context
    return requested or context


class ContextBoundGenerator:
    """What both backends share: a prompt that leaves no room to generate in the model's context gets
    k empty, unfinished samples (scored as wrong) instead of failing the whole call, and is counted.
    A backend sets `tokenizer` and `context` and implements `_generate` for the prompts that fit."""

    tokenizer = None
    context: int | None = None
    overlong_prompts = 0  # over this generator's life

    def _generate(self, prompts: list[str], settings: SamplingSettings, on_progress=None) -> list[list[Sample]]:
        raise NotImplementedError

    def generate(self, prompts: list[str], settings: SamplingSettings, on_progress=None) -> list[list[Sample]]:
        """`on_progress(done, total)` is called with the sequences sampled so far, where the backend
        samples in batches (transformers); vLLM shows its own progress bar. A sample's text starts with
        the reasoning block its prompt opened, if any (templates.reasoning_prefill)."""
        lengths = [len(ids) for ids in self.tokenizer(prompts, add_special_tokens=False).input_ids]
        fits = [self.context is None or length < self.context for length in lengths]
        self.overlong_prompts += fits.count(False)
        generated = iter(self._generate([p for p, fit in zip(prompts, fits) if fit], settings, on_progress)
                         if any(fits) else [])
        too_long = [Sample("", 0, False)] * settings.num_samples
        return [[Sample(reasoning_prefill(prompt) + s.text, s.num_tokens, s.finished) for s in next(generated)]
                if fit else list(too_long) for prompt, fit in zip(prompts, fits)]


class ProgressLine:
    """`math: 128/800 samples (16%) | 0:00:10 elapsed, ETA 0:00:52`, one line per call."""

    def __init__(self, label: str, unit: str = "samples"):
        self.label, self.unit, self.started = label, unit, time.time()

    def __call__(self, done: int, total: int) -> None:
        elapsed = time.time() - self.started
        eta = duration(elapsed / done * (total - done)) if done else "?"
        share = 100 * done // max(total, 1)
        print(f"{self.label}: {done}/{total} {self.unit} ({share}%) | {duration(elapsed)} elapsed, ETA {eta}",
              flush=True)


def load_generator(model_path: str, backend: str = "transformers", **backend_options):
    if backend == "transformers":
        from stages.lib.generation.hf import TransformersGenerator

        return TransformersGenerator(model_path, **backend_options)
    if backend == "vllm":
        from stages.lib.generation.vllm_backend import VLLMGenerator

        return VLLMGenerator(model_path, **backend_options)
    raise ValueError(f"unknown generation backend {backend!r}: expected 'transformers' or 'vllm'")
