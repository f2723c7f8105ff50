#!/usr/bin/env bash
# A/B benchmark on a GPU machine: builds k3_bench_cuda in every source tree under .variants (made by
# scripts/ab_prepare.sh; the builds share the cores), then runs the same k3_bench_cuda arguments in
# each tree, ROUNDS times, interleaved (tree 1, tree 2, …, tree 1, …) so that the machine's drift
# falls on every tree alike, and prints per tree and bench row the median time over the rounds.
# Logs: build/ab-logs (to $OUT as an archive: scripts/device_logs.sh).
#
#   scripts/gpu_ab.sh [--rounds N] [--filter REGEX] -- --moe-ggml --reps 10
#     --rounds N      rounds of the whole list (default 3)
#     --filter REGEX  rows of the summary: bench lines matching REGEX (default: every timed row)
#     --trees "A B"   only these trees of .variants (default: all); --rounds 0 builds only
set -uo pipefail
cd "$(dirname "$0")/.."

rounds=3 filter='\|' only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --filter) filter="$2"; shift 2 ;;
    --trees) only="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "gpu_ab.sh: unknown argument '$1' (bench arguments go after --)" >&2; exit 2 ;;
  esac
done
if [ $# -eq 0 ]; then
  echo "usage: scripts/gpu_ab.sh [--rounds N] [--filter REGEX] -- K3_BENCH_CUDA_ARGS" >&2
  exit 2
fi
source scripts/ab_trees.sh
ab_find_trees "$only"
source scripts/device_logs.sh
device_logs build/ab-logs
ab_build "$logs" k3_bench_cuda
ok=()
for t in "${trees[@]}"; do
  if [ -x "build/ab/$(basename "$t")/bench/k3_bench_cuda" ]; then ok+=("$t"); else echo "build failed: $t ($logs/$(basename "$t").build.log)"; fi
done

for r in $(seq 1 "$rounds"); do
  for t in "${ok[@]}"; do
    "build/ab/$(basename "$t")/bench/k3_bench_cuda" "$@" >"$logs/$(basename "$t").round$r.log" 2>&1 ||
      echo "bench failed: $t round $r ($logs/$(basename "$t").round$r.log)"
  done
done

# Per tree and row (its token count and name), the median of the first number after the second '|'.
python3 - "$logs" "$rounds" "$filter" "${ok[@]}" <<'PY'
import re, statistics, sys
logs, rounds, pattern, trees = sys.argv[1], int(sys.argv[2]), re.compile(sys.argv[3]), sys.argv[4:]
rows, order = {}, []
for t in trees:
    name = t.rstrip("/").split("/")[-1]
    for r in range(1, rounds + 1):
        try:
            lines = open(f"{logs}/{name}.round{r}.log").read().splitlines()
        except OSError:
            continue
        for line in lines:
            parts = line.split("|")
            if len(parts) < 3 or not pattern.search(line):
                continue
            fields = parts[2].split()
            try:
                value = float(fields[0])
            except (IndexError, ValueError):
                continue
            head = parts[0].split()
            key = ("T " + head[0] if head else "") + " | " + parts[1].strip()
            if key not in order:
                order.append(key)
            rows.setdefault(key, {}).setdefault(name, []).append(value)
names = [t.rstrip("/").split("/")[-1] for t in trees]
print("median over %d rounds (first column after the row name, e.g. µs)" % rounds)
print("%-48s" % "row" + "".join("%16s" % n[:15] for n in names))
for key in order:
    print("%-48s" % key[:48] + "".join(
        "%16s" % ("%.1f" % statistics.median(rows[key][n]) if n in rows[key] else "-") for n in names))
PY
