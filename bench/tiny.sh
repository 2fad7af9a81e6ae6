#!/usr/bin/env bash
# The tiny pipeline's wall time: the whole `all` target on this machine, from a fresh results
# directory, then each stage's time from Snakemake's benchmark files, slowest first.
#   bench/tiny.sh [workdir] [snakemake args...]   # default workdir: a new temporary directory
#   bench/tiny.sh /tmp/tiny-s1 --config seed=1      # another seed (results/ stays untouched)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
workdir="${1:-$(mktemp -d /tmp/tiny-bench.XXXXXX)}"
shift $(( $# > 0 ? 1 : 0 ))
mkdir -p "$workdir"
export PATH="$repo/.venv/bin:$PATH"

started=$(date +%s)
snakemake all -s "$repo/Snakefile" -d "$workdir" --profile "$repo/profiles/local" "$@" > "$workdir/snakemake.log" 2>&1
total=$(( $(date +%s) - started ))

echo "whole DAG: ${total} s on $(nproc) cores ($(date +%F))"
echo "per job (s), slowest first:"
find "$workdir/results/tiny/benchmarks" -name '*.tsv' | while read -r tsv; do
    printf '%10s  %s\n' "$(tail -1 "$tsv" | cut -f1)" "${tsv#"$workdir"/results/tiny/benchmarks/}"
done | sort -rn
echo "command: bench/tiny.sh $workdir $*"
