#!/usr/bin/env bash
# Trains the tiny models on one GPU: several variants side by side (the GPU is mostly idle in each:
# the steps are launch-bound), then keeps the best of each architecture by held-out accuracy.
#   train/train_tiny_models.sh OUT_DIR [MINUTES]   → OUT_DIR/tiny-k3, OUT_DIR/tiny-linear (shards + train_report.json)
# Finish a kept model into a checkpoint with: python3 train/checkpoint.py finish DIR train/configs/X.json
set -u
OUT=$(realpath -m "${1:?usage: train/train_tiny_models.sh OUT_DIR [MINUTES]}")
MIN=${2:-7}
cd "$(dirname "$0")/.."
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
python3 -c "import torch; print(torch.__version__)"
R=/tmp/runs; rm -rf $R; mkdir -p $R
run() { local name=$1; shift; python3 -u train/train.py "$@" --out $R/$name > $R/$name.log 2>&1; echo "$name exit $?"; }
run k3-eager   --config train/configs/tiny-k3.json --minutes $MIN --batch 128 --eval-n 100 &
run k3-compile --config train/configs/tiny-k3.json --minutes $MIN --batch 128 --eval-n 100 --compile &
run k3-b256    --config train/configs/tiny-k3.json --minutes $MIN --batch 256 --lr 3e-3 --eval-n 100 &
run lin-eager  --config train/configs/tiny-linear.json --minutes $MIN --batch 128 --eval-n 100 &
( sleep 90; nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv ) &
wait
for f in $R/*.log; do echo "== $f"; grep -v '"step"' $f | tail -6; grep '"step"' $f | tail -4; done
python3 - "$OUT" <<'PY'
import json, os, shutil, glob, sys
R, OUT = "/tmp/runs", sys.argv[1]
best = {}
for rep in glob.glob(f"{R}/*/train_report.json"):
    name = rep.split("/")[-2]
    acc = json.load(open(rep))["report"]["accuracy"]
    score = sum(acc.values()) / max(1, len(acc))
    kind = name.split("-")[0]
    print(name, round(score, 3), acc)
    if kind not in best or score > best[kind][0]:
        best[kind] = (score, name)
for kind, (score, name) in best.items():
    dst = f"{OUT}/{'tiny-k3' if kind == 'k3' else 'tiny-linear'}"
    os.makedirs(dst)
    for f in glob.glob(f"{R}/{name}/model-*.safetensors") + [f"{R}/{name}/train_report.json"]:
        shutil.copy(f, dst)
    print("kept", name, "->", dst)
PY
