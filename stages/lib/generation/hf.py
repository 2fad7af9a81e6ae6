"""transformers `generate` backend: batched sampling with left padding."""

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from stages.lib.generation import ContextBoundGenerator, Sample, SamplingSettings
from stages.lib.stop_tokens import split_stop_strings, stop_token_ids


class TransformersGenerator(ContextBoundGenerator):
    def __init__(self, model_path: str, batch_size: int = 64, dtype: str = "auto"):
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.tokenizer.padding_side = "left"
        device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype).to(device).eval()
        self.batch_size = batch_size
        self.end_ids = stop_token_ids(self.tokenizer)  # end of turn / document: not part of the text
        self.context = getattr(self.model.config, "max_position_embeddings", None)

    @torch.inference_mode()
    def _generate(self, prompts: list[str], settings: SamplingSettings, on_progress=None) -> list[list[Sample]]:
        torch.manual_seed(settings.seed)
        stop_ids, stop_strings = split_stop_strings(self.tokenizer, settings.stop_strings)
        flat = [p for p in prompts for _ in range(settings.num_samples)]
        outputs: list[Sample] = []
        for start in range(0, len(flat), self.batch_size):
            batch = self.tokenizer(flat[start:start + self.batch_size], return_tensors="pt", padding=True,
                                   add_special_tokens=False).to(self.model.device)
            generated = self.model.generate(
                **batch, do_sample=settings.temperature > 0, temperature=settings.temperature or None,
                top_p=settings.top_p, top_k=0, max_new_tokens=self._room(batch["input_ids"].shape[1], settings),
                eos_token_id=self.end_ids + stop_ids, pad_token_id=self.tokenizer.pad_token_id,
                stop_strings=stop_strings or None, tokenizer=self.tokenizer if stop_strings else None)
            for row in generated[:, batch["input_ids"].shape[1]:].tolist():
                outputs.append(self._sample(row, stop_ids, stop_strings))
            if on_progress:
                on_progress(len(outputs), len(flat))
        k = settings.num_samples
        return [outputs[i * k:(i + 1) * k] for i in range(len(prompts))]

    def _room(self, prompt_length: int, settings: SamplingSettings) -> int:
        """New tokens that fit in the model's context after a (left-padded) batch of prompts."""
        return settings.max_new_tokens if self.context is None else min(settings.max_new_tokens,
                                                                         self.context - prompt_length)

    def _sample(self, row: list[int], stop_ids: list[int], stop_strings: list[str]) -> Sample:
        for i, token in enumerate(row):
            if token in self.end_ids:
                return Sample(self.tokenizer.decode(row[:i], skip_special_tokens=True), i, True)
            if token in stop_ids:
                return Sample(self.tokenizer.decode(row[:i + 1], skip_special_tokens=True), i + 1, True)
        text = self.tokenizer.decode(row, skip_special_tokens=True)
        return Sample(text, len(row), any(text.endswith(s) for s in stop_strings))
