#!/usr/bin/env bash
# End-to-end CLI check of the CUDA backend on a GPU machine: make-tiny `small` checkpoints, then
# `k3 logits` and `k3 generate` on --device cuda against the CPU, printing the relative logit error
# and both greedy continuations. Usage: scripts/gpu_e2e.sh K3_BINARY [families...] (default: bf16
# fp8-block modelopt-fp8). Needs python3 with numpy for the comparison.
set -uo pipefail
k3="$1"; shift
families=("$@")
[ ${#families[@]} -eq 0 ] && families=(bf16 fp8-block modelopt-fp8)
work="$(mktemp -d)"
ids=$(seq -s, 1 37 | awk -F, '{for(i=1;i<=NF;i++) printf "%s%d", (i>1?",":""), ($i*131+7)%32000}')
for arch in kimi-k3 kimi-linear; do
  for fam in "${families[@]}"; do
    dir="$work/$arch-$fam"
    "$k3" make-tiny --arch "$arch" --family "$fam" --size small --out "$dir" >/dev/null || { echo "$arch $fam: make-tiny failed"; continue; }
    "$k3" logits --model "$dir" --ids "$ids" --out "$dir/cpu.npy" >/dev/null 2>"$dir/cpu.err" || { echo "$arch $fam: cpu logits failed: $(cat "$dir/cpu.err")"; continue; }
    "$k3" logits --model "$dir" --ids "$ids" --out "$dir/gpu.npy" --device cuda >/dev/null 2>"$dir/gpu.err" || { echo "$arch $fam: cuda logits failed: $(cat "$dir/gpu.err")"; continue; }
    err=$(python3 -c "import numpy as n; a=n.load('$dir/cpu.npy'); b=n.load('$dir/gpu.npy'); print('%.2e' % (abs(a-b).max()/abs(a).max()), '%.2f' % (a.argmax(-1)==b.argmax(-1)).mean())")
    cpu_gen=$("$k3" generate --model "$dir" --ids 1,2,3 --greedy --max-tokens 16 --ignore-eos 2>&1 | tail -1)
    gpu_gen=$("$k3" generate --model "$dir" --ids 1,2,3 --greedy --max-tokens 16 --ignore-eos --device cuda 2>&1 | tail -1)
    same=$([ "$cpu_gen" = "$gpu_gen" ] && echo same || echo DIFFERENT)
    echo "$arch $fam: logits rel err, argmax agreement = $err; greedy 16 tokens: $same (cpu: $cpu_gen | cuda: $gpu_gen)"
  done
done
rm -rf "$work"
