#!/usr/bin/env bash
# The main job: install the packages the k3 CLI needs, build only the CLI (a unity build; the CUDA
# backend too when a GPU and nvcc are present), then ask the trained tiny Kimi-K3 in models/tiny-k3
# one question through `k3 chat` and print its answer.  Usage: scripts/run.sh [QUESTION]
# The default question is an `add` example held out from training (docs/eval-tasks.md).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
model=models/tiny-k3
question="${1:-What is 25+17?}"

if [ ! -f "$model/config.json" ] || [ ! -f "$model/tiktoken.model" ]; then
  echo "run.sh: no checkpoint in $model (config.json, tiktoken.model): the trained tiny Kimi-K3 belongs there" >&2
  exit 1
fi

scripts/setup.sh --cli

nvcc=$(command -v nvcc || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; } || true)
cuda=OFF
if [ -n "$nvcc" ] && command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  cuda=ON
fi

dir=build/cli
echo "run.sh: building the k3 CLI in $dir (CUDA backend $cuda)"
# Only the CLI: no tests or benchmarks. The unity build merges each layer's sources into a few
# translation units, which parse the large headers once per batch instead of once per file.
mkdir -p "$dir"
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DK3_CUDA=$cuda -DK3_BUILD_TESTS=OFF \
  -DK3_BUILD_BENCH=OFF -DCMAKE_UNITY_BUILD=ON ${nvcc:+-DCMAKE_CUDA_COMPILER=$nvcc} >"$dir/configure.log" 2>&1 ||
  { tail -n 30 "$dir/configure.log" >&2; exit 1; }
cmake --build "$dir" --target k3_cli -j "$(nproc)" >"$dir/build.log" 2>&1 || { tail -n 40 "$dir/build.log" >&2; exit 1; }
echo "run.sh: built $dir/k3 ($((SECONDS - start)) s since start)"

device=cpu
[ "$cuda" = ON ] && device=cuda
# OpenMP workers sleep between parallel regions: spinning ones starve each other on a busy machine.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
reply=$(printf '%s\n' "$question" | "$dir/k3" chat --model "$model" --device "$device" --greedy --max-tokens 64)
# The last line is the parsed assistant message; its content is the answer.
answer=$(printf '%s\n' "$reply" | tail -n 1 | python3 -c 'import json, sys; m = json.load(sys.stdin); print(m.get("content") or "(no answer)")')
echo "question: $question"
echo "answer:   $answer"
echo "run.sh: done in $((SECONDS - start)) s"
