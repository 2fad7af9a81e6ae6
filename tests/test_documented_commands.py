"""Every command the README, the configs' and profiles' headers, preflight's hints and docs/adapting.md show
runs as written, from a fresh copy of the checkout: Snakemake ones as dry runs (the Slurm ones through the site
profile `make site-profile` installs), stage CLIs for real on the tiny model. A user copies these lines
before reading anything else (newcomer-review-3: the README's own launch line ended in a traceback)."""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from tests.snakemake_helpers import FAKE_APPTAINER_DIR, REPO

pytestmark = pytest.mark.slow  # every documented command, run in a copy of the checkout

# What a user writes in place of the docs' placeholders (test paths), and the commands a test cannot run
# here, each with why.
PLACEHOLDERS = {"/models/my-dev2": "{tiny_model}", "/models/my-base": "{model_without_template}",
                "<this repository>": str(REPO), "<scale>": "qwen2.5-1.5b"}
NOT_RUN = {
    "git clone": "the checkout itself",
    "make setup": "CI's first step",
    "make tiny": "the whole tiny run (CI runs the same DAG in the suite)",
    "make test": "this suite",
    "make rehearsal": "CI runs it after the suite",
    "make containers": "needs Apptainer",
    "make lock": "rewrites the lock",
    "make screenshot": "needs a finished tiny run and a browser",
    ".venv/bin/hf auth login": "interactive, and needs the hub",
    ".venv/bin/python -m stages.hub_probe": "needs the hub (tests/test_hub_probe.py runs it on the rehearsal's)",
    "bench/gpu_smoke.sh": "needs a GPU (tests/test_bench.py plans it)",
}


def readme_commands() -> list[str]:
    """The README's shell lines (```sh blocks, continuations joined) and its inline commands that start
    with `.venv/bin/` or `make `, comments removed."""
    text = (REPO / "README.md").read_text()
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            commands.append(line)
    commands += re.findall(r"`((?:\.venv/bin/|make )[^`]+)`", text)
    return [command for command in map(uncommented, commands) if command]


def header_commands() -> list[str]:
    """Commands in the comments of the Snakefile, the shipped configs and the profiles."""
    files = [REPO / "Snakefile", *sorted((REPO / "configs").glob("*.yaml")),
             *sorted((REPO / "profiles").glob("*/config.yaml"))]
    commands = []
    for path in files:
        for line in path.read_text().splitlines():
            match = re.match(r"#\s+((?:\.venv/bin/)?snakemake .*|make [a-z-]+(?:\s+[A-Z]+=\S+)*(?:\s+#.*)?$)", line)
            if match:
                commands.append(uncommented(match.group(1)))
    return commands


def uncommented(line: str) -> str:
    return re.sub(r"\s+#.*$", "", line).strip()


def skipped(command: str) -> str | None:
    return next((why for start, why in NOT_RUN.items() if command.startswith(start)), None)


@pytest.fixture(scope="module")
def checkout(tmp_path_factory, tiny_model_dir, small_data_dir) -> dict:
    """A fresh copy of the tracked files (mtimes kept, so make finds the venv current) with the venv linked
    in, a home with the README's site file, an empty Snakemake config directory, the stand-in apptainer,
    the tiny model and evaluation set where the README's stage examples read them, and the model without a
    chat template that docs/adapting.md starts from."""
    root = tmp_path_factory.mktemp("documented")
    work, home = root / "r1-pipeline", root / "home"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.split("\0")
    for name in filter(None, tracked):
        if (REPO / name).is_file():
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, work / name)
    (work / ".venv").symlink_to(Path(sys.executable).parent.parent)
    home.mkdir()
    (home / "r1-site.yaml").write_text(yaml.safe_dump({"results_dir": str(root / "scratch"),
                                                       "compute": {"r1_zero": {"gpu": 4, "mem_mb": 400000}}}))
    (work / "mine.yaml").write_text(yaml.safe_dump({"reasoning_rl": {"max_steps": 3}}))
    (work / "results" / "tiny" / "data").mkdir(parents=True)
    (work / "results" / "tiny" / "cold_start_sft").symlink_to(tiny_model_dir)
    shutil.copy(small_data_dir / "eval_math.parquet", work / "results" / "tiny" / "data" / "eval_math.parquet")
    row = pq.read_table(small_data_dir / "eval_math.parquet").to_pylist()[0]
    (work / "completions.jsonl").write_text(json.dumps({
        "prompt": row["prompt"], "solution": row["solution"],
        "completion": f"<think> x </think> <answer> {row['solution']} </answer>"}) + "\n")
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(root / "config"),
           "PATH": f"{FAKE_APPTAINER_DIR}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "R1_FAKE_APPTAINER_LOG": str(root / "apptainer-calls.jsonl"),
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    without_template = root / "models" / "my-base"
    shutil.copytree(tiny_model_dir, without_template, ignore=shutil.ignore_patterns("chat_template.jinja"))
    return {"work": work, "env": env, "home": str(home), "tiny_model": str(tiny_model_dir),
            "model_without_template": str(without_template)}


def filled(text: str, checkout: dict) -> str:
    """The text with the docs' placeholders replaced by what the test has in their place."""
    for placeholder, value in PLACEHOLDERS.items():
        text = text.replace(placeholder, value.format(**checkout))
    return text


def as_written(command: str, checkout: dict) -> str:
    """The command with the README's placeholders filled in; a Snakemake run becomes its dry run (an
    `sbatch --wrap` controller line: the Snakemake command it wraps)."""
    command = filled(command, checkout)
    if command.startswith("sbatch "):
        command = shlex.split(command)[-1]
    if re.match(r"(\.venv/bin/)?snakemake ", command) and " -n" not in f"{command} ":
        command += " -n"
    return command


def run(command: str, checkout: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=checkout["work"], env=checkout["env"], capture_output=True,
                          text=True, timeout=900)


def test_every_documented_command_runs_as_written(checkout):
    commands = list(dict.fromkeys(readme_commands() + header_commands()))
    # the site profile first, as the README's checklist has it: `--profile slurm` needs it
    commands.sort(key=lambda command: command != "make site-profile")
    assert "make site-profile" in commands and any("--profile slurm" in c for c in commands), commands
    ran, failures = [], []
    for command in commands:
        if skipped(command):
            continue
        line = as_written(command, checkout)
        done = run(line, checkout)
        ok = done.returncode == 0
        if line.startswith("make preflight"):  # it lists what the placeholder profile still needs (exit 1; make's 2)
            ok = "thing(s) to fix before the first run" in done.stdout and "Traceback" not in done.stderr
        ran.append(line)
        if not ok:
            failures.append(f"$ {line}\n(exit {done.returncode})\n{done.stdout[-1500:]}{done.stderr[-1500:]}")
    assert not failures, "\n\n".join(failures)
    # the whole checklist ran: the site profile, preflight, the Slurm launch and the controller's command
    assert any(line.startswith("make preflight") for line in ran)
    assert sum("--profile slurm" in line for line in ran) >= 3, ran
    assert (Path(checkout["env"]["XDG_CONFIG_HOME"]) / "snakemake" / "slurm" / "config.yaml").is_file()


def adapting_scripts(checkout: dict, outputs: Path) -> list[tuple[str, dict[Path, list[str]]]]:
    """docs/adapting.md's ```sh blocks, each as one bash script (so heredocs work): its commands as_written, the
    files it writes with the placeholders filled in. The comment lines right under a command are what the page
    says it prints: that command's output goes to a file under `outputs`, mapped to those lines, and its exit
    status is theirs to judge (a refusal's is not 0)."""
    scripts = []
    for block in re.findall(r"```sh\n(.*?)```", (REPO / "docs" / "adapting.md").read_text(), re.S):
        lines, expected, heredoc_end, command, output = [], {}, None, None, None
        for line in block.replace("\\\n", " ").splitlines():
            if heredoc_end is not None:  # a file the block writes
                lines.append(filled(line, checkout))
                heredoc_end = None if line == heredoc_end else heredoc_end
            elif line.startswith("#") and (output or command is not None):
                if output is None:  # the first line the command prints
                    output = outputs / f"{len(list(outputs.iterdir())) + 1}.out"
                    output.touch()
                    lines[command] = f"{{ {lines[command]}\n}} >{output} 2>&1 || true"
                    expected[output] = []
                expected[output].append(line[1:].strip())
            else:
                heredoc = re.search(r"<<-?\s*'?(\w+)'?", line)
                heredoc_end, output = heredoc and heredoc.group(1), None
                command = None if heredoc or not line.strip() or line.startswith("#") else len(lines)
                lines.append(filled(line, checkout) if command is None else as_written(uncommented(line), checkout))
        scripts.append(("set -e -o pipefail\ntrap 'echo \"failed: $BASH_COMMAND\" >&2' ERR\n" + "\n".join(lines),
                        expected))
    return scripts


def test_adapting_the_recipe_runs_as_written(checkout, tmp_path):
    """Each worked example of docs/adapting.md runs in order (its Snakemake runs planned, its stage CLIs for
    real), and each refusal or output the page shows is what the command prints (~ for the home, the model
    placeholder for the test's model)."""
    scripts = adapting_scripts(checkout, tmp_path)
    assert len(scripts) >= 7 and sum(len(expected) for _, expected in scripts) >= 5, scripts
    as_shown = {checkout["home"]: "~", **{value.format(**checkout): placeholder
                                         for placeholder, value in PLACEHOLDERS.items() if "{" in value}}
    for script, expected in scripts:
        done = run(script, checkout)
        assert done.returncode == 0, f"{script}\n(exit {done.returncode})\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        for output, lines in expected.items():
            printed = output.read_text()
            for path, shown in as_shown.items():
                printed = printed.replace(path, shown)
            missing = [line for line in lines if line not in printed]
            assert not missing, f"{script}\n\nthe page shows {missing}, the command printed:\n{printed[-3000:]}"


def test_preflights_hint_without_apptainer_runs_as_written(checkout):
    """No apptainer on PATH: preflight prints the whole command that runs without images; it plans."""
    env = dict(checkout["env"], PATH=f"{Path(sys.executable).parent}{os.pathsep}/usr/bin:/bin")
    done = subprocess.run([sys.executable, "-m", "stages.preflight", "--configfile", "configs/qwen2.5-1.5b.yaml",
                           "--profile", "profiles/slurm"], cwd=checkout["work"], env=env, capture_output=True,
                          text=True, timeout=900)
    hint = re.search(r"and the GPU packages in the venv: (snakemake .*)$", done.stdout, re.M)
    assert done.returncode == 1 and hint, done.stdout + done.stderr
    plan = subprocess.run(["bash", "-c", hint.group(1) + " -n"], cwd=checkout["work"], env=env, capture_output=True,
                          text=True, timeout=900)
    assert plan.returncode == 0, plan.stdout[-2000:] + plan.stderr[-2000:]
    assert "rule r1_zero:" in plan.stdout


def test_the_readme_stays_a_guide_one_can_read():
    """Under 4,000 words (newcomer-review-3: 6,365 words took 30 minutes, the cluster part began at word 2,451);
    lab notes go to docs/tiny-run.md, stage detail to docs/stages.md, renames to CHANGELOG.md."""
    words = len((REPO / "README.md").read_text().split())
    assert words < 4000, f"README.md has {words} words"
