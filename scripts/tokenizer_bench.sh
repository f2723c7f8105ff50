#!/usr/bin/env bash
# Encode throughput, single thread, same corpus (the ≥1 MB mixed-script reference corpus), same
# vocabulary (o200k ranks) and pattern (Kimi): k3 vs the npm package `tiktoken`, interleaved rounds.
# Usage: scripts/tokenizer_bench.sh [BUILD_DIR] [ROUNDS]   (BUILD_DIR default build/release)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/release}
ROUNDS=${2:-3}
scripts/tokenizer_reference.sh >/dev/null
[ -f build/tokenizer-reference/corpus.txt ] || { echo "no reference corpus (node/npm missing?)"; exit 1; }
[ -x "$BUILD/bench/k3_bench_tokenizer" ] || { echo "build $BUILD/bench/k3_bench_tokenizer first"; exit 1; }
for r in $(seq "$ROUNDS"); do
  k3=$("$BUILD/bench/k3_bench_tokenizer" --benchmark_format=csv 2>/dev/null | awk -F, '/BM_EncodeCorpus/ {printf "%.2f", $6/1e6}')
  npm=$(node tests/tokenizer/reference/bench_tiktoken.mjs build/npm build/tokenizer-reference 5 | awk '{print $2}')
  echo "round $r: k3 $k3 MB/s   tiktoken-npm $npm MB/s   ratio $(awk -v a="$k3" -v b="$npm" 'BEGIN{printf "%.2f", a/b}')"
done
