#!/usr/bin/env bash
# Load cost of a real-size vocabulary (o200k ranks, ~200k tokens): `k3 tokenize` on one word
# (whole process: CPU seconds and max RSS, /usr/bin/time) vs the npm package `tiktoken` (CPU
# seconds from reading the ranks to an encoder that has encoded one word, and its process's max RSS),
# interleaved rounds, medians.
# Usage: scripts/tokenizer_load_bench.sh [K3_BINARY] [ROUNDS]   (K3_BINARY default build/cpu/k3)
set -euo pipefail
cd "$(dirname "$0")/.."
K3=${1:-build/cpu/k3}
ROUNDS=${2:-5}
scripts/tokenizer_reference.sh >/dev/null
[ -f build/tokenizer-reference/tiktoken.model ] || { echo "no reference ranks (node/npm missing?)"; exit 1; }
DIR=build/tokenizer-load
mkdir -p "$DIR"
cp build/tokenizer-reference/tiktoken.model "$DIR/"
echo '{}' >"$DIR/tokenizer_config.json"
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
k3_cpu=() k3_rss=() npm_cpu=() npm_rss=()
for r in $(seq "$ROUNDS"); do
  read -r u s m < <( { /usr/bin/time -f "%U %S %M" "$K3" tokenize --model "$DIR" --text hello >/dev/null; } 2>&1 | tail -1)
  k3_cpu+=("$(awk -v u="$u" -v s="$s" 'BEGIN{print u+s}')") k3_rss+=("$m")
  out=$( { /usr/bin/time -f "rss %M" node tests/tokenizer/reference/load_tiktoken.mjs build/npm; } 2>&1)
  npm_cpu+=("$(awk '/load_cpu_s/ {print $3}' <<<"$out")") npm_rss+=("$(awk '/^rss/ {print $2}' <<<"$out")")
  echo "round $r: k3 ${k3_cpu[-1]} s ${k3_rss[-1]} KB   tiktoken-npm ${npm_cpu[-1]} s ${npm_rss[-1]} KB"
done
echo "median: k3 $(printf '%s\n' "${k3_cpu[@]}" | median) s CPU, $(printf '%s\n' "${k3_rss[@]}" | median) KB max RSS;" \
  "tiktoken-npm $(printf '%s\n' "${npm_cpu[@]}" | median) s CPU (load only), $(printf '%s\n' "${npm_rss[@]}" | median) KB max RSS (whole process)"
