#!/usr/bin/env bash
# Trains a tiny model on one GPU in the two stages that made models/tiny-k3 (14.1 minutes in all):
#   stage 1: seeded init, batch 128, peak lr 2e-3, 6.5 minutes;
#   stage 2: from stage 1's weights, batch 128, peak lr 1e-3, seed 2, 7.6 minutes.
# Each stage compiles the model (torch.compile; about 2 minutes of each stage's budget) and ends with
# a greedy check on held-out examples (train_report.json).
#   train/train_tiny_models.sh OUT_DIR [CONFIG]   → OUT_DIR/stage1, OUT_DIR/stage2 (the model)
# CONFIG defaults to train/configs/tiny-k3.json; train/configs/tiny-linear.json trains the Kimi-Linear.
set -euo pipefail
OUT=$(realpath -m "${1:?usage: train/train_tiny_models.sh OUT_DIR [CONFIG]}")
CONFIG=${2:-train/configs/tiny-k3.json}
cd "$(dirname "$0")/.."
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
mkdir -p "$OUT"
python3 -u train/train.py --config "$CONFIG" --compile --batch 128 --lr 2e-3 --seed 1 --minutes 6.5 \
  --eval-n 100 --out "$OUT/stage1" | tee "$OUT/stage1.log"
python3 -u train/train.py --config "$CONFIG" --compile --batch 128 --lr 1e-3 --seed 2 --minutes 7.6 \
  --eval-n 100 --init "$OUT/stage1" --out "$OUT/stage2" | tee "$OUT/stage2.log"
