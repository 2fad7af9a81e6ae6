"""Shared fixtures: small tiny-config data and a briefly pre-trained tiny model, built once per session."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from stages.data.tiny import TinyDataConfig, generate
from stages.lib.data.schema import write_tables
from stages.lib.tokenizer import chat_template_renderer

REPO = Path(__file__).resolve().parent.parent
# The slow tier (`make test` runs everything; `make test-fast` leaves it out): a test that runs Snakemake,
# a stage, a cluster or a container as a subprocess (it asks for one of these fixtures), runs in the vLLM
# environment, or is marked `slow` itself (whole files: `pytestmark = pytest.mark.slow`).
SUBPROCESS_FIXTURES = {"venv_env", "container_rootfs", "cluster"}


# `make test` runs the suite on two pytest-xdist workers (`-n 2 --dist loadgroup`): a test goes to whichever
# worker is free, except those of one xdist group, which run on one worker, one after the other. Grouped here:
# - the tests of a module that builds a module-scoped fixture (a cluster, a copied checkout, plans of the
#   real configs), so that it is built once;
# - the tests of the CPU image's root filesystem: one worker builds it (95 s on a fresh machine) while the
#   other would only wait for it;
# - the vLLM tests: each starts a vLLM CPU engine that takes every core and a GiB of KV cache.
# On the workers the slow tier goes first: the minutes-long tests start early, and the short ones fill the end.


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        if SUBPROCESS_FIXTURES & set(getattr(item, "fixturenames", ())) or item.get_closest_marker("vllm"):
            item.add_marker(pytest.mark.slow)
        group = xdist_group(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
    if hasattr(config, "workerinput"):  # an xdist worker: every worker sorts alike, as xdist requires
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def xdist_group(item) -> str | None:
    if item.get_closest_marker("vllm"):
        return "vllm"
    if "container_rootfs" in getattr(item, "fixturenames", ()):
        return "container_rootfs"
    fixtures = getattr(item, "_fixtureinfo", None)
    scopes = {definitions[-1].scope for definitions in (fixtures.name2fixturedefs.values() if fixtures else ())}
    return item.module.__name__ if "module" in scopes else None


SMALL_DATA = dict(num_rl_prompts=200, num_cold_start=96, num_general=60, num_eval_math=40,
                  num_eval_general=20, num_pretrain_docs=800, num_preference_pairs=400, num_rl_general=40,
                  num_rl_code=40, num_cold_start_code=24, num_eval_code=20, num_pretrain_code_docs=160)


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


@pytest.fixture(scope="session")
def container_rootfs() -> Path:
    """The CPU image as a root filesystem (tests/containers/build_rootfs.sh; reused while current).
    Needs root, apt and the package indexes; CI sets R1_REQUIRE_CONTAINERS=1 so that a missing piece
    fails instead of skipping."""
    required = os.environ.get("R1_REQUIRE_CONTAINERS") == "1"
    if os.geteuid() != 0 and not required:
        pytest.skip("not root: debootstrap and the image's install steps need it")
    rootfs = Path(os.environ.get("R1_TEST_ROOTFS", "/var/tmp/r1-test-rootfs"))
    done = subprocess.run(["bash", str(REPO / "tests" / "containers" / "build_rootfs.sh"), str(rootfs)],
                          capture_output=True, text=True, timeout=1500)
    if done.returncode != 0:
        message = f"build_rootfs.sh failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        pytest.fail(message) if required else pytest.skip(message)
    return rootfs


def as_qwen_base(model_dir: Path, directory: Path) -> Path:
    """A copy of a tiny model as a Qwen2.5 base model ships: its tokenizer's eos and its generation
    config's stop id are <|endoftext|>, while the ChatML template ends a turn with <|im_end|>, which
    nothing marks as a stop. (The tiny tokenizer's own eos is <|im_end|>, which hides that.)"""
    import shutil

    from transformers import AutoTokenizer, GenerationConfig

    from stages.lib.stop_tokens import END_OF_TEXT

    shutil.copytree(model_dir, directory)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    tokenizer.eos_token = END_OF_TEXT
    tokenizer.save_pretrained(directory)
    generation = GenerationConfig.from_pretrained(directory)
    generation.eos_token_id = tokenizer.eos_token_id
    generation.save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def qwen_style_model_dir(tiny_model_dir, tmp_path_factory) -> Path:
    return as_qwen_base(tiny_model_dir, tmp_path_factory.mktemp("qwen_style") / "base")


@pytest.fixture(scope="session")
def vllm_model_dir(small_data_dir, tmp_path_factory) -> Path:
    """A Qwen-style tiny model that vLLM's CPU attention takes (head size 64: hidden 256 over 4 heads),
    briefly pre-trained. Skips (fails in CI) where there is no vLLM CPU environment."""
    from stages import base_model
    from tests.vllm_env import require_vllm_env

    require_vllm_env()
    out = tmp_path_factory.mktemp("vllm_models") / "built"
    base_model.main(["--corpus", str(small_data_dir / "pretrain.parquet"), "--output_dir", str(out),
                     "--hidden_size", "256", "--num_attention_heads", "4", "--num_key_value_heads", "2",
                     "--num_hidden_layers", "2", "--intermediate_size", "512", "--vocab_size", "400",
                     "--block_size", "128", "--max_position_embeddings", "512", "--max_steps", "30",
                     "--save_steps", "1000", "--logging_steps", "10"])
    return as_qwen_base(out, out.parent / "base")


@pytest.fixture(scope="session")
def helpful_reward_model_dir(tiny_model_dir, small_data_dir, tmp_path_factory) -> Path:
    """A helpful reward model trained briefly on the small data's preference pairs."""
    from stages import reward_model

    out = tmp_path_factory.mktemp("reward_models") / "helpful"
    reward_model.main(["--kind", "helpful", "--model_path", str(tiny_model_dir), "--data",
                       str(small_data_dir / "preferences_helpful.parquet"), "--output_dir", str(out),
                       "--learning_rate", "1e-3", "--per_device_train_batch_size", "16", "--max_length", "128",
                       "--save_steps", "1000"])
    return out


def run_card_snippet(card: str, cwd: Path) -> str:
    """Runs a model card's (or the README's) Python block as a user would paste it; returns what it printed."""
    code = card.split("```python\n", 1)[1].split("```", 1)[0]
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout
