#!/usr/bin/env bash
# Fingerprints the CPU logits of every make-tiny family of both architectures (the expert pack is
# Kimi-K3 only), and of the
# transformers peer fixture, at every CPU kernel tier this machine has (and the GGUF peer fixture's
# tensors through the exact dequantizers): one line per
# (checkpoint, tier) with the SHA-256 of the float32 logits .npy. Two k3 builds compute the same
# logits exactly when their outputs are identical.
#
#   scripts/logits_fingerprint.sh K3_BINARY WORK_DIR [CHECKPOINT_BINARY]
#
# Checkpoints are written into WORK_DIR/ckpt by CHECKPOINT_BINARY (default K3_BINARY) once and
# reused, so an old binary's checkpoints can be read by a new one:
#   scripts/logits_fingerprint.sh old/k3 /tmp/fp > before.txt
#   scripts/logits_fingerprint.sh new/k3 /tmp/fp > after.txt && diff before.txt after.txt
# With K3_FP_DEVICE=cuda the logits come from the CUDA backend instead (one line per checkpoint; no
# CPU tiers, no dequant lines).
set -euo pipefail
k3="${1:?usage: logits_fingerprint.sh K3_BINARY WORK_DIR [CHECKPOINT_BINARY]}"
work="${2:?usage: logits_fingerprint.sh K3_BINARY WORK_DIR [CHECKPOINT_BINARY]}"
writer="${3:-$k3}"
here="$(cd "$(dirname "$0")/.." && pwd)"
shared="$here/../shared"
families=(bf16 modelopt-mixed modelopt-nvfp4 modelopt-fp8 compressed-tensors-mxfp4 fp8-block modelslim-w4a8 gguf gguf-expert-pack)
ids=1,7,42,3,99,5,250,17,8,64,2,31

device="${K3_FP_DEVICE:-cpu}"
if [ "$device" = cpu ]; then
  tiers=(scalar)
  grep -qw avx2 /proc/cpuinfo && tiers+=(avx2)
  grep -qw avx512f /proc/cpuinfo && grep -qw avx512_vnni /proc/cpuinfo && tiers+=(avx512)
  modes=(weight-only checkpoint)
else
  tiers=("$device") modes=(default)
fi

mkdir -p "$work/ckpt" "$work/out"
checkpoints=()
for arch in kimi-k3 kimi-linear; do
  for family in "${families[@]}"; do
    # The expert pack holds Kimi-K3 experts only.
    [ "$arch-$family" = kimi-linear-gguf-expert-pack ] && continue
    dir="$work/ckpt/$arch-$family"
    [ -f "$dir/config.json" ] || "$writer" make-tiny --arch "$arch" --family "$family" --seed 7 --out "$dir" >/dev/null
    checkpoints+=("$dir")
  done
done
peer="$shared/fixtures/kimi-linear-peer/ckpt"
[ -d "$peer" ] && checkpoints+=("$peer")

for dir in "${checkpoints[@]}"; do
  name=$(basename "$dir"); [ "$dir" = "$peer" ] && name=kimi-linear-peer
  for tier in "${tiers[@]}"; do
    for activations in "${modes[@]}"; do
      out="$work/out/$name.$tier.$activations.npy"
      if [ "$device" = cpu ]; then
        K3_CPU_ISA=$tier "$k3" logits --model "$dir" --ids "$ids" --threads 2 --activations "$activations" --out "$out" >/dev/null
      else
        "$k3" logits --model "$dir" --ids "$ids" --device "$device" --out "$out" >/dev/null
      fi
      echo "$name $tier $activations $(sha256sum "$out" | cut -c1-16)"
    done
  done
done

# The GGUF peer fixture: every tensor of its GGUF file through k3's exact dequantizers.
gguf="$shared/fixtures/gguf-peer/quants.gguf"
if [ "$device" = cpu ] && [ -f "$gguf" ]; then
  for name in $("$k3" inspect "$gguf" --json | python3 -c 'import json, sys; print(" ".join(t["name"] for t in json.load(sys.stdin)["tensors"]))'); do
    out="$work/out/gguf-peer.$name.npy"
    "$k3" inspect "$gguf" --tensor "$name" --dequant --out "$out" >/dev/null
    echo "gguf-peer $name dequant $(sha256sum "$out" | cut -c1-16)"
  done
fi
