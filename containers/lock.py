"""Regenerate the lock, containers/requirements-cpu.txt, after a pin in pyproject.toml changed:

    make lock                     (python containers/lock.py [pip-compile options, e.g. --upgrade])

pip-compile resolves pyproject.toml's dependencies, its `test` extra and its build requirements for
this interpreter (CPython 3.11, as the CPU image's Debian 12), keeping the lock's current pins where
they still fit. Every package the GPU image also installs is held to the GPU image's version
(containers/requirements-gpu.txt), except those containers/cpu-gpu-differences.txt lists with the
reason one side forces: so the CPU suite tests the versions the GPU runs.

The venv (`make setup`) and the CPU image (install.sh) install the lock with --no-deps.
"""

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

CONTAINERS = Path(__file__).resolve().parent
REPO = CONTAINERS.parent
LOCK = CONTAINERS / "requirements-cpu.txt"
GPU_REQUIREMENTS = CONTAINERS / "requirements-gpu.txt"
FORCED_DIFFERENCES = CONTAINERS / "cpu-gpu-differences.txt"
# torch's build is the wheel source's choice (a CPU index or wheel directory): see the note below.
HEADER = """\
# The lock: every package of the venv (`make setup`) and of the CPU image (install.sh), pinned.
# Do not edit: `make lock` regenerates it from pyproject.toml (containers/lock.py says how).
# torch is the CPU build: an index with only the default torch wheels cannot install it; point pip
# at a CPU wheel index or a directory holding the wheel (PIP_EXTRA_INDEX_URL or PIP_FIND_LINKS).
"""


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned(requirements: Path) -> dict[str, str]:
    """name -> version of a fully pinned requirements file (a line that is not `name==version` is an error)."""
    pins = {}
    for number, line in enumerate(requirements.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            if not version:
                raise ValueError(f"{requirements}:{number}: {line!r} is not pinned with ==")
            pins[normalized(name.split("[")[0])] = version.strip()
    return pins


def forced_differences() -> dict[str, str]:
    """name -> why the CPU lock and the GPU image cannot share its version."""
    reasons = {}
    for line in FORCED_DIFFERENCES.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, reason = line.split(maxsplit=1)
            reasons[normalized(name)] = reason
    return reasons


def main(pip_compile_options: list[str]) -> None:
    pip_compile = Path(sys.executable).parent / "pip-compile"
    held = {name: version for name, version in pinned(GPU_REQUIREMENTS).items() if name not in forced_differences()}
    with tempfile.TemporaryDirectory() as scratch:
        constraints = Path(scratch) / "gpu-versions.txt"
        constraints.write_text("".join(f"{name}=={version}\n" for name, version in sorted(held.items())))
        subprocess.run([str(pip_compile), "--quiet", "--extra", "test", "--all-build-deps", "--allow-unsafe",
                        "--strip-extras", "--no-emit-index-url", "--no-emit-find-links",
                        "--constraint", str(constraints),
                        "--output-file", str(LOCK.relative_to(REPO)), *pip_compile_options, "pyproject.toml"],
                       cwd=REPO, check=True, env={**os.environ, "CUSTOM_COMPILE_COMMAND": "make lock"})
        # The annotations name the scratch file; name what it was made from.
        text = LOCK.read_text().replace(f"-c {constraints}", f"-c {GPU_REQUIREMENTS.relative_to(REPO)}")
    LOCK.write_text(HEADER + text)


if __name__ == "__main__":
    main(sys.argv[1:])
