"""House habits, checked with every test run (and so in CI): ruff with pyproject.toml's settings, and
`snakemake --lint` on the workflow under each config."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from stages.config_checks import compute_settings
from stages.preflight import COMPUTE_KEY_OF_RULE
from tests.snakemake_helpers import REPO, merged, snakemake, write_config

# Rules whose job runs stages.launch on the host (several GPUs or nodes): the launcher starts each task
# in the image itself, because a container around the job would hide srun and the allocation
# (rules/common.smk, container_image). Snakemake's linter cannot know that, and asks for a container.
NO_CONTAINER = "Specify a conda environment or container for each rule."


def test_the_code_passes_ruff():
    ruff = Path(sys.executable).parent / "ruff"
    done = subprocess.run([str(ruff), "check", "--no-cache", "."], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def lints(output: str) -> dict[str, set[str]]:
    """`snakemake --lint` text: the rule (or snakefile) -> the titles of its lints."""
    found, current = {}, None
    for line in output.splitlines():
        if match := re.match(r"Lints for (?:rule (\w+)|snakefile (\S+?)):? ", line + " "):
            current = match.group(1) or match.group(2)
            found[current] = set()
        elif (match := re.match(r"    \* (.*?):?$", line)) and current:
            found[current].add(match.group(1))
    return found


def launched(config: dict, rule: str) -> bool:
    settings = compute_settings(config, COMPUTE_KEY_OF_RULE.get(rule, rule))
    return settings.get("nodes", 1) > 1 or settings.get("gpu", 0) > 1 or bool(settings.get("vllm_server_gpus"))


@pytest.mark.parametrize("name, override", [(name, {}) for name in ["tiny", "qwen2.5-1.5b", "qwen2.5-7b", "paper"]]
                         + [("tiny", {"cold_start_data": {"source": "r1_zero"}})])  # rules only this option has
def test_the_workflow_passes_snakemake_lint(name, override, tmp_path, venv_env):
    config = merged(yaml.safe_load((REPO / "configs" / f"{name}.yaml").read_text()), override)
    config_path = write_config(tmp_path, config)
    done = snakemake(tmp_path, config_path, "--lint", env=dict(venv_env, HF_HUB_OFFLINE="1"), check=False)
    found = lints(done.stdout + done.stderr)
    expected = {rule: {NO_CONTAINER} for rule in found if launched(config, rule)}
    assert found == expected, done.stdout[-4000:]
    assert (done.returncode == 0) == (not found)


# Layers, top to bottom: the stage modules; the reward library; the data package; shared leaves. A
# package imports only from its own layer and those below it.
SHARED_LEAVES = {"artifacts", "cli", "latex", "templates", "tokenizer"}
MAY_IMPORT = {"rewards": {"rewards", "data"} | SHARED_LEAVES, "data": {"data"} | SHARED_LEAVES}


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_dependencies_point_down(package):
    import ast

    upward = []
    for path in sorted((REPO / "stages" / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else \
                [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            for name in names:
                parts = name.split(".")
                if parts[0] == "stages" and (len(parts) < 2 or parts[1] not in MAY_IMPORT[package]):
                    upward.append(f"{path.relative_to(REPO)}:{node.lineno} imports {name}")
    assert not upward, "\n".join(upward)
