#!/usr/bin/env bash
# The KDA / MLA attention kernels on a GPU machine in one go (as scripts/gpu.sh, for these kernels
# only): build k3_test_cuda and k3_bench_cuda_attention (cmake + ninja, K3_CUDA=ON; PCRE2 from
# .deps/pcre2 when present, see scripts/gpu_deps.sh), run the KDA/MLA GPU tests, and on a failure
# the failing tests again under compute-sanitizer memcheck; then the attention benchmark. Logs go to
# build/gpu-attn-logs (to $OUT as summary.txt and an archive: scripts/device_logs.sh); the summary is
# printed last.
#
#   scripts/gpu_attention.sh [--fallback DIR] [--reps N] [--quick] [--no-bench] [--ncu]
# --fallback DIR: binaries built elsewhere (k3_test_cuda, k3_bench_cuda_attention) when the build fails.
# --ncu: afterwards, Nsight Compute on one call of each KDA/MLA kernel variant (bench --profile;
#        --clock-control none), full report in ncu.txt, a digest in the summary.
set -uo pipefail
cd "$(dirname "$0")/.."

fallback="" bench_args=() run_bench=1 run_ncu=0
while [ $# -gt 0 ]; do
  case "$1" in
    --fallback) fallback="$2"; shift 2 ;;
    --reps) bench_args+=(--reps "$2"); shift 2 ;;
    --quick) bench_args+=(--quick); shift ;;
    --no-bench) run_bench=0; shift ;;
    --ncu) run_ncu=1; shift ;;
    *) echo "gpu_attention.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

source scripts/device_logs.sh
device_logs build/gpu-attn-logs
build="${K3_GPU_BUILD_DIR:-build/gpu-attn}"
summary="$logs/summary.txt"
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
if [ -d .deps/pcre2/lib/pkgconfig ]; then
  export PKG_CONFIG_PATH="$PWD/.deps/pcre2/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
fi

t0=$(date +%s)
if cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DK3_CUDA=ON >"$logs/configure.log" 2>&1 &&
   cmake --build "$build" -j "$(nproc)" --target k3_test_cuda k3_bench_cuda_attention >"$logs/build.log" 2>&1; then
  bin_test="$build/tests/k3_test_cuda" bin_bench="$build/bench/k3_bench_cuda_attention"
  say "build: ok in $(( $(date +%s) - t0 )) s"
else
  say "build: FAILED after $(( $(date +%s) - t0 )) s"
  tail -n 20 "$logs/configure.log" "$logs/build.log" 2>/dev/null | tee -a "$summary"
  [ -n "$fallback" ] || exit 1
  bin_test="$fallback/k3_test_cuda" bin_bench="$fallback/k3_bench_cuda_attention"
  say "binaries: falling back to $fallback"
fi

say "device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 1)"
# Two invocations: the bulk-copy (TMA) kernels last (the KDA bulk variants, the MLA decode), so that a
# fault there cannot take the rest down with the CUDA context.
t0=$(date +%s)
bulk_tests='*Kda*Bulk*:*Kda*bulk*:*MlaDecode*:MlaCuda.DecodeAfterPrefill*'
timeout 60 "$bin_test" --gtest_filter="*Kda*:*Mla*-$bulk_tests" --gtest_color=no >"$logs/test.log" 2>&1
test_rc=$?
timeout 45 "$bin_test" --gtest_filter="$bulk_tests" --gtest_color=no >"$logs/test_bulk.log" 2>&1
bulk_rc=$?
say "bulk-copy tests: exit $bulk_rc: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) *\] [0-9]+ test' "$logs/test_bulk.log" | tr '\n' ' ')"
cat "$logs/test_bulk.log" >>"$logs/test.log"
[ "$test_rc" = 0 ] && test_rc=$bulk_rc
[ "$bulk_rc" = 0 ] || bench_args+=(--no-bulk)  # keep a faulting variant out of the bench
say "tests: exit $test_rc in $(( $(date +%s) - t0 )) s: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) *\] [0-9]+ test' "$logs/test.log" | tr '\n' ' ')"
grep -E '^\[       OK \]|^\[  FAILED  \]' "$logs/test.log" | sed 's/^/  /' | tee -a "$summary" >/dev/null
if [ "$test_rc" != 0 ]; then
  grep -E 'Failure|rel_l2|max_abs|Expected|Which is|Value of|error|seed' "$logs/test.log" | head -n 80 | tee -a "$summary"
  failed=$(grep -E '^\[  FAILED  \] [A-Za-z]' "$logs/test.log" | sed -E 's/^\[  FAILED  \] ([^ ,]+).*/\1/' | sort -u | tr '\n' ':')
  if [ -n "$failed" ] && command -v compute-sanitizer >/dev/null; then
    timeout 45 compute-sanitizer --tool memcheck "$bin_test" --gtest_filter="$failed" --gtest_color=no >"$logs/memcheck.log" 2>&1
    say "memcheck of the failures: exit $?"
    grep -E 'Invalid|ERROR SUMMARY|at 0x|by thread' "$logs/memcheck.log" | head -n 20 | tee -a "$summary"
  fi
fi

bench_rc=0
if [ "$run_bench" = 1 ]; then
  t0=$(date +%s)
  timeout 75 "$bin_bench" "${bench_args[@]}" >"$logs/bench.log" 2>&1
  bench_rc=$?
  say "bench: exit $bench_rc in $(( $(date +%s) - t0 )) s"
  cat "$logs/bench.log" >>"$summary"
fi
if [ "$run_ncu" = 1 ] && command -v ncu >/dev/null; then
  t0=$(date +%s)
  timeout 120 ncu --clock-control none --kernel-name regex:'chunk_intra_kernel|chunk_inter_kernel|mla_decode_kernel|kda_decode_kernel' \
    --launch-count 16 --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
    "$bin_bench" --profile "${bench_args[@]}" >"$logs/ncu.txt" 2>&1
  say "ncu: exit $? in $(( $(date +%s) - t0 )) s"
  grep -E '^  [a-z_]+.*\(|Duration|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Warp Cycles Per Issued|Registers Per Thread|stalled' \
    "$logs/ncu.txt" | sed -E 's/ +/ /g' | cut -c1-230 >"$logs/ncu_digest.txt"
fi
echo
cat "$summary"
[ -f "$logs/ncu_digest.txt" ] && { echo "== ncu digest =="; cat "$logs/ncu_digest.txt"; }
[ "$test_rc" = 0 ] && [ "$bench_rc" = 0 ]
