#!/usr/bin/env bash
# The quality table of docs/quality.md: every checkpoint family quantized by `k3 quantize` from a
# float model, scored by `k3 eval` (accuracy per task, KL and top-1 agreement against the float
# model) under each family's own activation contract, and its size on disk.
#   scripts/quality_table.sh [--k3 BIN] [--model DIR] [--device cpu|cuda] [--n N] [--out DIR]
#                            [--jobs J] [--reuse]
# --jobs J evaluates J rows at once (one k3 eval uses about 1.3 cores on the CPU; on CUDA each
# takes a 4 GiB arena per model, not the default share of free memory); --reuse keeps a
# row's evaluation from an earlier run of the same options (OUT/ROW/eval-DEVICE.json).
set -euo pipefail
cd "$(dirname "$0")/.."
K3=build/release/k3 MODEL=models/tiny-k3 DEVICE=cpu N=100 OUT=build/quality JOBS=1 REUSE=0
while [ $# -gt 0 ]; do
  case "$1" in
    --k3) K3="$2"; shift 2 ;;
    --model) MODEL="$2"; shift 2 ;;
    --device) DEVICE="$2"; shift 2 ;;
    --n) N="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --jobs) JOBS="$2"; shift 2 ;;
    --reuse) REUSE=1; shift ;;
    *) echo "quality_table.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
# family[:recipe] — the GGUF families once per named recipe.
ROWS=(bf16 modelopt-mixed modelopt-nvfp4 modelopt-fp8 compressed-tensors-mxfp4 fp8-block modelslim-w4a8
      gguf:q4_k_m gguf:q2_k_experts gguf-expert-pack:q2_k_experts)
mkdir -p "$OUT"

# One row: quantize (once) and evaluate into OUT/ROW/eval-DEVICE.json.
evaluate() {
  local row=$1 family="${1%%:*}" recipe="" dir="$OUT/${1//:/-}"
  [ "$row" != "$family" ] && recipe="${row#*:}"
  if [ ! -e "$dir/config.json" ]; then
    rm -rf "$dir"
    "$K3" quantize --from "$MODEL" --family "$family" ${recipe:+--recipe "$recipe"} --out "$dir" > /dev/null 2>&1
  fi
  local report="$dir/eval-$DEVICE.json"
  if [ "$REUSE" = 1 ] && [ -s "$report" ]; then return; fi
  local memory=()
  [ "$DEVICE" != cpu ] && memory=(--gpu-memory 4G)
  "$K3" eval --model "$dir" --kl-base "$MODEL" --device "$DEVICE" "${memory[@]}" --activations checkpoint --n "$N" --json > "$report.part"
  mv "$report.part" "$report"
}

running=0 failed=0
for row in "${ROWS[@]}"; do
  evaluate "$row" &
  running=$((running + 1))
  if [ "$running" -ge "$JOBS" ]; then wait -n || failed=1; running=$((running - 1)); fi
done
while [ "$running" -gt 0 ]; do wait -n || failed=1; running=$((running - 1)); done
[ "$failed" = 0 ] || { echo "quality_table.sh: a row failed (its eval-$DEVICE.json.part is left in $OUT)" >&2; exit 1; }

echo "| family | device | add | sort | copy | recall | total | KL mean | KL p99 | top-1 | size MB |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for row in "${ROWS[@]}"; do
  dir="$OUT/${row//:/-}"
  size=$(du -sbL --exclude='eval-*.json*' "$dir" | cut -f1)
  /usr/bin/python3 - "$dir/eval-$DEVICE.json" "$row" "$DEVICE" "$size" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
t, kl = r["tasks"], r["kl"]
acc = lambda k: f'{100 * t[k]["accuracy"]:.1f}'
print(f'| {sys.argv[2].replace(":", " ")} | {sys.argv[3]} | {acc("add")} | {acc("sort")} | {acc("copy")} | {acc("recall")} | '
      f'{100 * r["total"]["accuracy"]:.1f} | {kl["mean"]:.1e} | {kl["p99"]:.1e} | {kl["top1_agreement"]:.4f} | {int(sys.argv[4]) / 1e6:.1f} |')
PY
done
