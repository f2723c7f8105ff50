#!/usr/bin/env bash
# The main job on a built-in tiny model: install packages, build, write a tiny Kimi-K3
# checkpoint (once), check its load plan and generate from it.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"  # idle OpenMP workers sleep: faster on shared machines
scripts/setup.sh
scripts/build.sh release >/dev/null
K3=build/release/k3
model=build/tiny-k3-bf16
[ -f "$model/tiktoken.model" ] || "$K3" make-tiny --arch kimi-k3 --family bf16 --out "$model"
"$K3" check "$model" | tail -n 3
"$K3" generate --model "$model" --prompt "The quick brown fox" --max-tokens 16 --ignore-eos --json
