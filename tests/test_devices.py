"""Where a stage puts its models on a GPU node, modelled on CPU: several ranks on one node
(LOCAL_RANK), several GPUs visible to one process, and bf16 weights that need fp32 master copies
unless DeepSpeed keeps them."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from stages.lib.configs import SFTStageConfig
from stages.lib.rewards.model_rewards import build_model_rewards
from stages.lib.training import process_device, refuse_data_parallel


def test_each_rank_uses_its_own_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    devices = []
    for rank in ("0", "1"):
        monkeypatch.setenv("LOCAL_RANK", rank)
        devices.append(process_device())
    assert devices == [torch.device("cuda", 0), torch.device("cuda", 1)]
    monkeypatch.delenv("LOCAL_RANK")
    assert process_device() == torch.device("cuda", 0)


def test_reward_models_sit_on_the_device_they_are_given(helpful_reward_model_dir):
    (reward,) = build_model_rewards({"helpful_rm": str(helpful_reward_model_dir)}, torch.device("cpu"))
    assert reward.model.device == torch.device("cpu")


def test_weights_load_in_fp32_unless_deepspeed_keeps_master_copies(tiny_model_dir, tmp_path, monkeypatch):
    bf16 = tmp_path / "bf16"
    AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.bfloat16).save_pretrained(bf16)
    config = SFTStageConfig(model_path=str(bf16), train_data=["unused"], output_dir=str(tmp_path / "out"))
    monkeypatch.delenv("ACCELERATE_USE_DEEPSPEED", raising=False)
    plain = AutoModelForCausalLM.from_pretrained(bf16, **config.model_kwargs(config.deepspeed))
    assert {p.dtype for p in plain.parameters()} == {torch.float32}
    assert AutoModelForCausalLM.from_pretrained(bf16, **config.model_kwargs("zero2.json")).dtype == torch.bfloat16
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")  # `accelerate launch` with a DeepSpeed config file
    assert AutoModelForCausalLM.from_pretrained(bf16, **config.model_kwargs("")).dtype == torch.bfloat16


def test_a_single_process_stage_refuses_several_visible_gpus(monkeypatch, tiny_model_dir, small_data_dir, tmp_path):
    """Not nn.DataParallel behind the config's back: the stage stops before loading anything."""
    from stages import sft

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(RuntimeError, match=r"8 GPUs are visible to this one process: .*CUDA_VISIBLE_DEVICES=0"):
        sft.main(["--model_path", str(tiny_model_dir), "--train_data", str(small_data_dir / "cold_start.parquet"),
                  "--output_dir", str(tmp_path / "out")])
    assert not (tmp_path / "out.work").exists()
    monkeypatch.setenv("WORLD_SIZE", "8")  # one process per GPU, as the launcher starts them
    refuse_data_parallel()


def test_a_deepspeed_config_asking_bf16_of_a_device_without_it_is_one_clear_line(monkeypatch):
    """transformers' own error (`ds bf16.enabled=True vs hf bf16|bf16_full_eval=False`) names no file or key."""
    from stages.lib.training import device_defaults

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    with pytest.raises(RuntimeError, match=r"asks mixed_precision: bf16, which this device lacks \(no GPU\)"):
        device_defaults()
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "no")
    assert device_defaults() == {"bf16": False, "use_cpu": True}


def test_published_files_are_readable_as_the_umask_allows(tmp_path):
    import os
    import stat

    from stages.lib.artifacts import staged_output

    previous = os.umask(0o022)
    try:
        with staged_output(tmp_path / "out", "test", {}, {}) as (scratch, _):
            weights = scratch / "model.safetensors"
            weights.write_bytes(b"weights")
            weights.chmod(0o600)  # as safetensors and DeepSpeed write them
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "out" / "model.safetensors").stat().st_mode) == 0o644
