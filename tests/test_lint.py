"""House habits, checked with every test run (and so in CI): ruff with pyproject.toml's settings, and
`snakemake --lint` on the workflow under each config."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from stages.lib.settings import compute_settings, uses_launcher
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
    return uses_launcher(compute_settings(config, COMPUTE_KEY_OF_RULE.get(rule, rule)))


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


def stage_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) for each import of a project module in a file: `from stages.lib import x` is stages.lib.x."""
    import ast

    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "stages":
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name.split(".")[0] == "stages"]
    return found


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted((REPO / "stages").rglob("*.py"))}
LIBRARY = "stages.lib"
# The one stage that reads another's code: stages.compare pairs prompts as the report does. The pairing stays in
# stages/report.py while docs/report.png pins that file's code; it moves to the library with the next screenshot.
STAGE_IMPORTS_ALLOWED = {("stages.compare", "stages.report")}


def test_the_library_imports_no_stage_and_no_stage_imports_another():
    """Two layers a newcomer can see in the folders: stages/ runs, stages/lib/ is shared. Every import points
    from a stage into the library, or within the library."""
    wrong = []
    for name, path in MODULES.items():
        for line, target in stage_imports(path):
            if (name, target.rpartition(".")[0]) in STAGE_IMPORTS_ALLOWED:
                continue
            if not target.startswith(f"{LIBRARY}.") and target != LIBRARY:
                wrong.append(f"{path.relative_to(REPO)}:{line} imports the stage module {target}")
    assert not wrong, "\n".join(wrong)


def library_unit(module: str) -> str:
    """A library module's unit: its subpackage (rewards, generation, data) or itself (configs)."""
    return module.split(".")[2]


def test_the_library_s_modules_and_packages_import_each_other_without_a_cycle():
    edges = {}
    for name, path in MODULES.items():
        if name.startswith(f"{LIBRARY}."):
            for _, target in stage_imports(path):
                unit = library_unit(".".join(target.split(".")[:3]))
                if unit != library_unit(name):
                    edges.setdefault(library_unit(name), set()).add(unit)
    done, visiting = set(), []

    def visit(unit):
        assert unit not in visiting, f"import cycle: {' -> '.join(visiting[visiting.index(unit):] + [unit])}"
        if unit in done:
            return
        visiting.append(unit)
        for target in sorted(edges.get(unit, ())):
            visit(target)
        visiting.pop()
        done.add(unit)

    for unit in sorted(edges):
        visit(unit)


# Within the library, the reward and data packages sit low: they import only themselves, the data
# package and the shared leaves.
SHARED_LEAVES = {"artifacts", "cli", "latex", "templates", "stop_tokens", "tokenizer"}
MAY_IMPORT = {"rewards": {"rewards", "data"} | SHARED_LEAVES, "data": {"data"} | SHARED_LEAVES}


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_dependencies_point_down(package):
    upward = []
    for path in sorted((REPO / "stages" / "lib" / package).rglob("*.py")):
        for line, name in stage_imports(path):
            parts = name.split(".")
            if parts[:2] != ["stages", "lib"] or len(parts) < 3 or parts[2] not in MAY_IMPORT[package]:
                upward.append(f"{path.relative_to(REPO)}:{line} imports {name}")
    assert not upward, "\n".join(upward)
