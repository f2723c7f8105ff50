#!/usr/bin/env bash
# End-to-end CPU prefill / decode tok/s of the `small` make-tiny Kimi-K3 for several families.
# Rounds are interleaved across families (the machine drifts); medians are printed.
# Usage: bench/scripts/e2e_cpu.sh [K3_BINARY] [ROUNDS] [FAMILIES...]
set -euo pipefail
cd "$(dirname "$0")/../.."
K3=${1:-build/release/k3}
ROUNDS=${2:-3}
shift $(( $# > 2 ? 2 : $# ))
FAMILIES=("$@")
[ ${#FAMILIES[@]} -gt 0 ] || FAMILIES=(bf16 fp8-block modelopt-mixed compressed-tensors-mxfp4 modelslim-w4a8 gguf gguf-expert-pack)
PROMPT_IDS=$(seq -s, 11 138)  # 128 prompt tokens
out=build/bench-e2e
mkdir -p "$out"
for f in "${FAMILIES[@]}"; do
  [ -f "$out/$f/config.json" ] || "$K3" make-tiny --arch kimi-k3 --family "$f" --size small --out "$out/$f" >/dev/null
done
: >"$out/results.txt"
for r in $(seq "$ROUNDS"); do
  for f in "${FAMILIES[@]}"; do
    line=$("$K3" generate --model "$out/$f" --ids "$PROMPT_IDS" --max-tokens 32 --ignore-eos --json | tail -n 1)
    echo "$f $line" >>"$out/results.txt"
  done
done
python3 - "$out/results.txt" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    fam, js = line.split(" ", 1)
    d = json.loads(js)
    rows.setdefault(fam, []).append(d)
print(f"{'family':28} {'prefill tok/s':>14} {'decode tok/s':>13}  (median of {len(next(iter(rows.values())))} rounds, 128-token prompt, 32 new)")
for fam, ds in rows.items():
    pf = statistics.median(d["prefill_tok_s"] for d in ds)
    dc = statistics.median(d["decode_tok_s"] for d in ds)
    print(f"{fam:28} {pf:14.1f} {dc:13.1f}")
PY
