#!/usr/bin/env bash
# The whole test suite, from a fresh machine: install packages, build, then
#   1. short libFuzzer runs of every parser (K3_FUZZ_SECONDS each, default 10),
#   2. the suite under AddressSanitizer + UndefinedBehaviorSanitizer,
#   3. the suite on the release build (CUDA tests skip without a GPU).
# Set K3_TEST_QUICK=1 to run only step 3.
set -euo pipefail
cd "$(dirname "$0")/.."
# OpenMP threads sleep instead of spinning between parallel regions: on a shared 2-core machine
# spinning workers starve each other (the engine tests run ~4x slower with the default policy).
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
# Each stage's wall time goes to the log, so a CI run that nears its budget shows where.
stage_started=$SECONDS
stage() {
  echo "== [$((SECONDS - stage_started)) s since the last stage, $SECONDS s in all] $*"
  stage_started=$SECONDS
}
scripts/setup.sh
scripts/setup_node.sh
scripts/check_history.sh

stage "release build"
scripts/build.sh release
scripts/tokenizer_reference.sh
if [ -z "${K3_TEST_QUICK:-}" ]; then
  stage "fuzz build"
  scripts/build.sh fuzz
  stage "fuzz runs"
  scripts/fuzz.sh "${K3_FUZZ_SECONDS:-10}"
  stage "ASan+UBSan build"
  scripts/build.sh asan
  stage "test suite under ASan+UBSan"
  # The OpenAI-client tests of structured outputs and /v1/responses drive code that the C++ suite
  # already runs under the sanitizers (grammar, constrained decoding, the responses API); they run
  # on the release build only. The load test keeps its 256 concurrent streams but checks every 8th
  # against the prompt served alone (those one-at-a-time references are most of its time). The
  # quality-table rows (every family quantized from the trained model and evaluated) and the
  # PyTorch parity check run on the release build only; the quantize writers, the eval and
  # `k3 logits` run under the sanitizers on make-tiny models. All of this keeps the stage in CI's
  # budget.
  K3_LOAD_CHECK_EVERY=8 ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build/asan --output-on-failure -j "$(nproc)" \
      -E '^(k3_test_openai_client_structured|k3_test_openai_client_responses|k3_test_torch_parity|QualityTable/.*)$'
fi
stage "test suite (release build)"
ctest --test-dir build/release --output-on-failure -j "$(nproc)"
stage "done"
