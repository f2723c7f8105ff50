#!/usr/bin/env bash
# How far each numeric format reaches outside its own folder: for every folder F of
# src/quant/formats/, the source files (*.h *.cpp *.cu *.cuh under src/) outside
# src/quant/formats/F/ that mention the format (case-insensitive extended regex below), next to the
# number of source files inside that folder. Run from anywhere; reads the working tree only.
#
#   scripts/format_mentions.sh            table
#   scripts/format_mentions.sh --list     the table, then the outside files of each format
set -euo pipefail

cd "$(dirname "$0")/.."
list=0
if [[ "${1:-}" == "--list" ]]; then list=1; fi

# What counts as a mention of each format.
pattern_of() {
  case "$1" in
    dense) echo 'dense_decode|dense_matrix|dense_dot' ;;
    fp8) echo 'fp8' ;;
    nvfp4) echo 'nvfp4' ;;
    mxfp4) echo 'mxfp4' ;;
    modelslim) echo 'modelslim|w4a8|w8a8' ;;
    ggml) echo 'ggml|gguf' ;;
    *) echo "$1" ;;  # a folder added later: its own name
  esac
}

sources() {  # NUL-separated source files under $1
  find "$1" -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) -print0
}

# The known folders first, in the order the docs list them, then any other folder.
formats=()
for f in dense fp8 nvfp4 mxfp4 modelslim ggml; do
  if [[ -d "src/quant/formats/$f" ]]; then formats+=("$f"); fi
done
for d in src/quant/formats/*/; do
  f=$(basename "$d")
  if [[ " ${formats[*]} " != *" $f "* ]]; then formats+=("$f"); fi
done

printf '%-10s  %-34s  %s\n' format 'files outside its folder (mention)' 'files inside its folder'
printf '%-10s  %-34s  %s\n' ---------- ---------------------------------- -----------------------
declare -A outside_files
for f in "${formats[@]}"; do
  re=$(pattern_of "$f")
  outside=$(find src -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) \
              -not -path "src/quant/formats/$f/*" -print0 | xargs -0 -r grep -liE -- "$re" | sort || true)
  inside=$(sources "src/quant/formats/$f" | tr -cd '\0' | wc -c)
  n_out=0
  if [[ -n "$outside" ]]; then n_out=$(printf '%s\n' "$outside" | wc -l); fi
  outside_files[$f]=$outside
  printf '%-10s  %-34s  %s\n' "$f" "$n_out" "$inside"
done

if (( list )); then
  for f in "${formats[@]}"; do
    printf '\n%s (/%s/):\n' "$f" "$(pattern_of "$f")"
    if [[ -n "${outside_files[$f]}" ]]; then printf '%s\n' "${outside_files[$f]}" | sed 's/^/  /'; fi
  done
fi
