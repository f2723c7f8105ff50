#!/usr/bin/env bash
# Runs every libFuzzer target in build/fuzz for the given seconds each (default 20), starting
# from the seed corpus in fuzz/corpus/<target>. Longer runs: scripts/fuzz.sh 3600
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-20}"
shopt -s nullglob
targets=(build/fuzz/fuzz/k3_fuzz_*)
[ "${#targets[@]}" -gt 0 ] || { echo "fuzz.sh: no fuzz targets built (run scripts/build.sh fuzz)" >&2; exit 1; }
for t in "${targets[@]}"; do
  name=$(basename "$t")
  work="build/fuzz/corpus/$name"; mkdir -p "$work"
  seeds="fuzz/corpus/${name#k3_fuzz_}"
  # Per-target cap on one allocation: a parser whose memory is proportional to its input stays
  # far below it at -max_len=65536, one that amplifies (e.g. ~75 bytes per array element) fails.
  case "$name" in
    k3_fuzz_gguf) limits=(-malloc_limit_mb=2) ;;
    *) limits=() ;;
  esac
  echo "== fuzz $name for ${seconds}s"
  "$t" -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 "${limits[@]}" -print_final_stats=0 \
       "$work" $( [ -d "$seeds" ] && echo "$seeds" ) 2>build/fuzz/$name.log \
    || { tail -50 build/fuzz/$name.log; echo "fuzz.sh: $name found a crash" >&2; exit 1; }
  grep -E "^#[0-9]+.*DONE" build/fuzz/$name.log | tail -1 || true
done
