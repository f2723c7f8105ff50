#!/usr/bin/env bash
# The whole test suite, from a fresh machine: install packages, build, then
#   1. short libFuzzer runs of every parser (K3_FUZZ_SECONDS each, default 20),
#   2. the suite under AddressSanitizer + UndefinedBehaviorSanitizer,
#   3. the suite on the release build (CUDA tests skip without a GPU).
# Set K3_TEST_QUICK=1 to run only step 3.
set -euo pipefail
cd "$(dirname "$0")/.."
# OpenMP threads sleep instead of spinning between parallel regions: on a shared 2-core machine
# spinning workers starve each other (the engine tests run ~4x slower with the default policy).
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
scripts/setup.sh
scripts/setup_node.sh
scripts/check_history.sh

scripts/build.sh release
scripts/tokenizer_reference.sh
if [ -z "${K3_TEST_QUICK:-}" ]; then
  scripts/build.sh fuzz
  scripts/fuzz.sh "${K3_FUZZ_SECONDS:-20}"
  scripts/build.sh asan
  echo "== test suite under ASan+UBSan"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build/asan --output-on-failure -j "$(nproc)"
fi
echo "== test suite (release build)"
ctest --test-dir build/release --output-on-failure -j "$(nproc)"
