#!/usr/bin/env bash
# GPU smoke test: every stage of the recipe on one GPU with Qwen2.5-0.5B (configs/gpu-smoke.yaml),
# a handful of steps each, vLLM for all generation. Prints each stage's wall time from Snakemake's
# benchmark files. Needs a CUDA machine with the GPU extras (`pip install -e '.[gpu]'`, or the GPU
# container) and either hub access or a local copy of the model:
#
#   bench/gpu_smoke.sh                      # fetches Qwen/Qwen2.5-0.5B
#   bench/gpu_smoke.sh /models/Qwen2.5-0.5B # a local model directory (no network needed)
#   bench/gpu_smoke.sh --dry-run [model]    # only the plan and its commands (any machine; CI runs this)
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
dry_run=false
if [ "${1:-}" = "--dry-run" ]; then dry_run=true; shift; fi
model="${1:-Qwen/Qwen2.5-0.5B}"
workdir="${GPU_SMOKE_DIR:-$(mktemp -d /tmp/gpu-smoke.XXXXXX)}"
config="$workdir/config.yaml"

$dry_run || nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python - "$repo/configs/gpu-smoke.yaml" "$config" "$model" <<'PY'
import sys, yaml
source, target, model = sys.argv[1:]
config = yaml.safe_load(open(source))
config["base"] = {"name_or_path": model}
config["distill"]["students"]["small"] = {"name_or_path": model}
yaml.safe_dump(config, open(target, "w"), sort_keys=False)
PY

if $dry_run; then
    snakemake all -s "$repo/Snakefile" -d "$workdir" --cores 1 --configfile "$config" -n -p
    exit
fi

# One GPU for every stage: a stage process that sees several refuses to start (stages.training.refuse_data_parallel)
export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}"
started=$(date +%s)
# --cores 1: one job at a time, the stages share the one GPU
snakemake all -s "$repo/Snakefile" -d "$workdir" --cores 1 --configfile "$config"
echo "whole DAG: $(( $(date +%s) - started )) s on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"

echo "stage wall times (s):"
for tsv in "$workdir"/results/gpu-smoke/benchmarks/*.tsv "$workdir"/results/gpu-smoke/benchmarks/*/*.tsv; do
    [ -e "$tsv" ] || continue
    printf '  %-40s %s\n' "${tsv#"$workdir"/results/gpu-smoke/benchmarks/}" "$(tail -1 "$tsv" | cut -f1)"
done
echo "command: bench/gpu_smoke.sh $*"
