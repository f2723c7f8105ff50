#!/usr/bin/env bash
# The standard A/B set for a change that must not slow the GPU path, on a GPU machine: builds k3,
# k3_bench_cuda and k3_bench_cuda_attention in every source tree under .variants (made by
# scripts/ab_prepare.sh; built in build/ab/<tree>, sharing the cores), then runs the set ROUNDS times, interleaved
# (tree 1, tree 2, …, tree 1, …) so that the machine's drift falls on every tree alike:
#   model      k3 bench --synthetic kimi-linear-48b-a3b --batch 1,8,64
#   moe-w4     k3_bench_cuda --moe-w4 --tokens 1,64,4096
#   attention  k3_bench_cuda_attention --quick
# and prints (scripts/ab_compare.py), line by line of each output, every tree's per-field medians over the rounds and the
# ratio of each field to the first tree's. Logs: build/ab-logs (to $OUT as an
# archive: scripts/device_logs.sh).
#
#   scripts/gpu_ab_set.sh [--rounds N]   (default 3; 0 builds only)
set -uo pipefail
cd "$(dirname "$0")/.."
rounds=3
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    *) echo "gpu_ab_set.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
source scripts/ab_trees.sh
ab_find_trees ""
source scripts/device_logs.sh
device_logs build/ab-logs
ab_build "$logs" k3_cli k3_bench_cuda k3_bench_cuda_attention
[ "$build_rc" -eq 0 ] || exit 1

sets=(model moe-w4 attention)
run_set() {  # tree set
  local b="build/ab/$(basename "$1")"
  case "$2" in
    model) "$b/k3" bench --synthetic kimi-linear-48b-a3b --batch 1,8,64 ;;
    moe-w4) "$b/bench/k3_bench_cuda" --moe-w4 --tokens 1,64,4096 --reps 20 ;;
    attention) "$b/bench/k3_bench_cuda_attention" --quick ;;
  esac
}
for r in $(seq 1 "$rounds"); do
  for s in "${sets[@]}"; do
    for t in "${trees[@]}"; do
      run_set "$t" "$s" >"$logs/$(basename "$t").$s.round$r.log" 2>&1 || echo "failed: $t $s round $r"
    done
  done
done
[ "$rounds" -gt 0 ] || exit 0
python3 scripts/ab_compare.py "$logs" "$rounds" "${sets[*]}" "${trees[@]}"
