#!/usr/bin/env bash
# GPU smoke check: the dress rehearsal on one CUDA GPU (tests/rehearsal/run.py --gpu). The real
# configs/qwen2.5-1.5b.yaml with the rehearsal's overlay (tests/rehearsal/overlay.yaml: steps, lengths)
# and one GPU per stage (tests/rehearsal/overlay-gpu.yaml), Qwen-shaped models and data sets built on
# the spot at their hub ids (nothing is downloaded), every job in the GPU image through Apptainer as on
# the cluster, one at a time, vLLM for every sampling step. Prints each stage's wall time.
#
# The install route: this checkout's venv (`make setup`: Snakemake) and the GPU image (`make containers`
# on a machine with Apptainer: containers/r1-gpu.sif from containers/requirements-gpu.txt, the
# resolved GPU set; or set containers.gpu / containers.cpu in a layered file named by
# R1_REHEARSAL_SITE). Then, on a GPU node (e.g. `srun --gres=gpu:1 --pty bash`):
#
#   bench/gpu_smoke.sh              # the whole DAG on GPU 0
#   bench/gpu_smoke.sh --dry-run    # only the plan and its commands (any machine with apptainer; CI runs this)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
dry_run=()
if [ "${1:-}" = "--dry-run" ]; then dry_run=(--dry-run); else nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; fi
export R1_REHEARSAL_DIR="${R1_REHEARSAL_DIR:-$(mktemp -d /tmp/gpu-smoke.XXXXXX)}"
started=$(date +%s)
cd "$repo"
"$repo/.venv/bin/python" -m tests.rehearsal.run --gpu "${dry_run[@]}"
echo "whole run: $(( $(date +%s) - started )) s; command: bench/gpu_smoke.sh $*"
