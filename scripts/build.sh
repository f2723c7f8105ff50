#!/usr/bin/env bash
# Configures and builds one k3 build tree.  Usage: scripts/build.sh [release|asan|fuzz] [cmake args…]
set -euo pipefail
cd "$(dirname "$0")/.."
kind="${1:-release}"; shift || true
jobs="${K3_JOBS:-$(nproc)}"
# Sanitizer and fuzz reports need file:line, not full debug info; line tables alone halve the
# compile time of the template-heavy translation units.
line_tables=(-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG")
# A unity build (CMakeLists.txt: which sources never merge) parses the large headers once per batch
# of sources instead of once per source: a CI build on 2 cores takes a fraction of the time, with
# bit-identical CPU logits (scripts/logits_fingerprint.sh). K3_UNITY=OFF builds source by source.
unity=(-DCMAKE_UNITY_BUILD="${K3_UNITY:-ON}")
case "$kind" in
  release) dir=build/release; args=(-DCMAKE_BUILD_TYPE=Release "${unity[@]}"); target=all ;;
  asan)    dir=build/asan; args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "${line_tables[@]}" "${unity[@]}" -DK3_SANITIZE=ON -DK3_CUDA=OFF -DK3_BUILD_BENCH=OFF); target=all ;;
  fuzz)    dir=build/fuzz; args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "${line_tables[@]}" "${unity[@]}" -DK3_FUZZ=ON -DK3_CUDA=OFF -DK3_BUILD_TESTS=OFF
                                 -DK3_BUILD_BENCH=OFF -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++)
           target=k3_fuzz ;;  # the fuzz programs and the layers they link, not the whole engine
  *) echo "build.sh: unknown build kind '$kind' (release|asan|fuzz)" >&2; exit 2 ;;
esac
cmake -S . -B "$dir" -G Ninja "${args[@]}" "$@" >/dev/null
cmake --build "$dir" -j "$jobs" --target "$target"
