"""Shared fixtures: small tiny-config data and a briefly pre-trained tiny model, built once per session."""

import os
from pathlib import Path

import pytest

from stages.data.tiny import TinyDataConfig, generate, write_tables
from stages.tokenizer import chat_template_renderer

REPO = Path(__file__).resolve().parent.parent
SMALL_DATA = dict(num_rl_prompts=200, num_cold_start=96, num_general=60, num_eval_math=40,
                  num_eval_general=20, num_pretrain_docs=800, num_preference_pairs=400, num_rl_general=40)


@pytest.fixture(scope="session")
def small_data_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("data")
    write_tables(generate(TinyDataConfig(output_dir=str(directory), seed=0, **SMALL_DATA), chat_template_renderer()),
                 directory)
    return directory


@pytest.fixture(scope="session")
def tiny_model_dir(small_data_dir, tmp_path_factory) -> Path:
    """A 2-layer model pre-trained for a few steps: enough to exercise every stage."""
    from stages import base_model

    out = tmp_path_factory.mktemp("models") / "base"
    base_model.main(["--corpus", str(small_data_dir / "pretrain.parquet"), "--output_dir", str(out),
                     "--hidden_size", "64", "--num_hidden_layers", "2", "--intermediate_size", "128",
                     "--vocab_size", "400", "--block_size", "128", "--max_steps", "30", "--save_steps", "1000",
                     "--logging_steps", "10"])
    return out


@pytest.fixture(scope="session")
def venv_env() -> dict:
    """The environment for running Snakemake and stage CLIs as subprocesses with this interpreter."""
    import sys

    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    return env
