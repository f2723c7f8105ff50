#!/usr/bin/env bash
# The CUDA backend on a GPU machine in one go: build (cmake + ninja, K3_CUDA=ON, only the CUDA test
# and bench targets), run the GPU tests (k3_test_cuda, three shards in parallel), run the GPU
# benchmarks (k3_bench_cuda: ceilings, memory-bound kernels, GEMMs, decode GEMMs, MoE; then its
# quantized-expert sections: --moe-w4, --moe-w4a8, --moe-ggml; the same MoE layer through PyTorch's torch._grouped_mm, the peer; then
# `k3 bench --synthetic`: Kimi-Linear-48B all on the GPU and with half the experts on the CPU, the real
# Kimi-K3's first two layers with uniform and Zipf-skewed routing),
# write the full logs to build/gpu-logs (and, on a lent device machine, summary.txt and an archive of
# them to $OUT: scripts/device_logs.sh), and print a short summary at the end.
#
#   scripts/gpu.sh                     build in build/gpu, test, bench
#   scripts/gpu.sh --prebuilt DIR      skip the build: DIR holds k3_test_cuda and k3_bench_cuda
#   scripts/gpu.sh --fallback DIR      build; if the build fails, use the binaries in DIR
#   scripts/gpu.sh --build-only | --quick (bench: M = 1 and 1024 only) | --no-bench
#   scripts/gpu.sh --filter 'GTEST_FILTER'   only these tests (e.g. '*MoeW4*:*CudaModelVsCpu*')
#   scripts/gpu.sh --test-timeout S          stop each test shard after S seconds (a lent machine's
#                                            command limit), keeping its log; the summary lists the
#                                            tests cut off and says how many shards were stopped
#   scripts/gpu.sh --bench 'ARGS'            instead of the benchmark list, k3_bench_cuda ARGS only
#                                            (e.g. '--moe-w4 --tokens 1,8,4096'); repeatable
#
# A machine without PCRE2's development files (the lent H200 image) builds with a static PCRE2
# carried in .deps/pcre2 (scripts/gpu_deps.sh makes it; docs/cuda-backend.md): it is put on
# PKG_CONFIG_PATH when present; its copy of the shared fixtures, .deps/shared, becomes ../shared where
# the machine has none. Exit status: 0 when the build (if any) and every test passed.
set -uo pipefail
cd "$(dirname "$0")/.."

prebuilt="" fallback="" build_only=0 bench_args=() run_bench=1 test_filter="" only_benches=() test_timeout=""
while [ $# -gt 0 ]; do
  case "$1" in
    --prebuilt) prebuilt="$2"; shift 2 ;;
    --fallback) fallback="$2"; shift 2 ;;
    --build-only) build_only=1; shift ;;
    --quick) bench_args+=(--quick); shift ;;
    --no-bench) run_bench=0; shift ;;
    --filter) test_filter="$2"; shift 2 ;;
    --test-timeout) test_timeout="$2"; shift 2 ;;
    --bench) only_benches+=("$2"); shift 2 ;;
    *) echo "gpu.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
if [ -n "$test_timeout" ] && ! [[ "$test_timeout" =~ ^[1-9][0-9]*$ ]]; then
  echo "gpu.sh: --test-timeout '$test_timeout' is not a whole number of seconds" >&2; exit 2
fi

source scripts/device_logs.sh
device_logs build/gpu-logs
build="${K3_GPU_BUILD_DIR:-build/gpu}"
summary="$logs/summary.txt"
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }

if [ -d .deps/pcre2/lib/pkgconfig ]; then
  export PKG_CONFIG_PATH="$PWD/.deps/pcre2/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
fi
boost_args=()
if [ ! -d /usr/include/boost ] && [ -d .deps/boost/include ]; then
  boost_args=(-DBoost_NO_BOOST_CMAKE=ON -DBoost_INCLUDE_DIR="$PWD/.deps/boost/include")
fi
# NCCL for the GPU ranks: the CUDA toolkit's when it has one, else PyTorch's nvidia-nccl package.
nccl_args=()
if nccl_root=$(python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null) &&
   [ -f "$nccl_root/include/nccl.h" ]; then
  nccl_args=(-DK3_NCCL_ROOT="$nccl_root")
fi
if [ ! -e ../shared ] && [ -d .deps/shared ]; then
  ln -s "$PWD/.deps/shared" ../shared  # the fixture tests read ../shared (K3_SHARED_DIR)
fi

bin_test="" bin_bench="" bin_k3=""
if [ -n "$prebuilt" ]; then
  bin_test="$prebuilt/k3_test_cuda" bin_bench="$prebuilt/k3_bench_cuda" bin_k3="$prebuilt/k3"
  say "binaries: prebuilt in $prebuilt"
else
  t0=$(date +%s)
  if cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DK3_CUDA=ON "${boost_args[@]}" "${nccl_args[@]}" >"$logs/configure.log" 2>&1 &&
     cmake --build "$build" -j "$(nproc)" --target k3_test_cuda k3_bench_cuda k3_bench_cuda_hybrid k3_cli >"$logs/build.log" 2>&1; then
    bin_test="$build/tests/k3_test_cuda" bin_bench="$build/bench/k3_bench_cuda" bin_k3="$build/k3"
    say "build: ok in $(( $(date +%s) - t0 )) s ($build)"
  else
    say "build: FAILED after $(( $(date +%s) - t0 )) s; last lines of configure.log / build.log:"
    tail -n 15 "$logs/configure.log" "$logs/build.log" 2>/dev/null | tee -a "$summary"
    if [ -z "$fallback" ]; then exit 1; fi
    bin_test="$fallback/k3_test_cuda" bin_bench="$fallback/k3_bench_cuda" bin_k3="$fallback/k3"
    say "binaries: falling back to $fallback"
  fi
fi
[ "$build_only" = 1 ] && exit 0

# The tests read ../shared/fixtures (the peer fixture); a checkout that carries a copy in .shared
# (git-ignored; docs/cuda-backend.md) links it there.
if [ ! -e ../shared ] && [ -d .shared ]; then ln -s "$PWD/.shared" ../shared 2>/dev/null || true; fi

nvidia-smi >"$logs/nvidia-smi.txt" 2>&1 || true
say "device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 1)"

# The suite in three gtest shards at once: the model tests spend most of their time in the CPU
# engine's reference forward, which a third of the cores runs nearly as fast (2026-11-29: the whole
# suite took 237 s in one process; the model tests in three shards 97 to over 125 s per shard).
t0=$(date +%s)
shards=3
threads=$(( $(nproc) / shards )); [ "$threads" -ge 1 ] || threads=1
for i in $(seq 0 $((shards - 1))); do
  OMP_NUM_THREADS=$threads GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i \
    ${test_timeout:+timeout "$test_timeout"} "$bin_test" --gtest_color=no \
    ${test_filter:+--gtest_filter="$test_filter"} >"$logs/test.shard$i.log" 2>&1 &
done
test_rc=0 stopped=0
for job in $(jobs -p); do
  wait "$job"
  rc=$?
  [ "$rc" = 0 ] || test_rc=1
  [ "$rc" = 124 ] && stopped=$((stopped + 1))
done
cat "$logs"/test.shard*.log >"$logs/test.log"
say "tests: exit $test_rc in $(( $(date +%s) - t0 )) s: $(grep -hE '^\[  (PASSED|FAILED|SKIPPED) *\] [0-9]+ test' "$logs"/test.shard*.log | tr '\n' ' ')"
grep -E '^\[  FAILED  \] [^0-9]' "$logs/test.log" | sort -u | tee -a "$summary"
if [ "$stopped" -gt 0 ]; then
  # A test that started and never ended: cut off by --test-timeout (its shard's later tests never ran).
  say "tests: $stopped shard(s) stopped after ${test_timeout} s; cut off: $(awk '
    /^\[ RUN      \]/ { run[$4] = 1 }
    /^\[ +(OK|FAILED|SKIPPED) +\]/ { delete run[$4] }
    END { for (t in run) printf "%s ", t }' "$logs/test.log")"
fi

bench_rc=0
if [ "$run_bench" = 1 ]; then
  t0=$(date +%s)
  : >"$logs/bench.log"
  # Every benchmark runs even when one before it failed; a failure is logged and makes the exit status 1.
  bench() {
    echo "== $*" >>"$logs/bench.log"
    "$@" >>"$logs/bench.log" 2>&1 || { echo "(failed: $*)" | tee -a "$logs/bench.log"; bench_rc=1; }
  }
  if [ "${#only_benches[@]}" -gt 0 ]; then
    for args in "${only_benches[@]}"; do
      read -r -a words <<<"$args"
      bench "$bin_bench" "${words[@]}"
    done
  else
    bench "$bin_bench" "${bench_args[@]}"
    bench "$bin_bench" --moe-w4
    bench "$bin_bench" --moe-w4a8
    bench "$bin_bench" --moe-ggml
    bench python3 bench/scripts/torch_grouped_mm_moe.py
    if [ -x "$bin_k3" ]; then
      # Kimi-Linear-48B's bf16 weights (98 GB) need an H200; an 80 GB card runs its first 14 layers.
      gpu_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -n 1)
      kl_layers=(); [ "${gpu_mib:-0}" -lt 100000 ] && kl_layers=(--layers 14)
      bench "$bin_k3" bench --synthetic kimi-linear-48b-a3b "${kl_layers[@]}" --batch 1,8,64 --context 1024 --steps 32 \
        --json "$logs/bench_model.json"
      # The real Kimi-K3's first two layers (896 experts, bf16 67.5 GB), uniform and Zipf-skewed routing.
      k3_config=../shared/fixtures/real-configs/kimi-k3.config.json
      if [ -f "$k3_config" ]; then
        for routing in uniform zipf:1.0; do
          bench "$bin_k3" bench --synthetic "$k3_config" --layers 2 --gpu-memory 95% --batch 1,8,64 --context 1024 \
            --steps 16 --routing "$routing"
        done
      fi
      # Hybrid experts at real dimensions: half of every MoE layer's experts on the host's CPU (8 layers:
      # 7 MoE layers, 12.7 GB of bf16 experts in host memory), against the all-GPU eager step.
      bench "$bin_k3" bench --synthetic kimi-linear-48b-a3b --layers 8 --experts-on-cpu 128 --batch 1,8,64 \
        --context 256 --steps 16 --json "$logs/bench_hybrid.json"
    fi
  fi
  say "bench: exit $bench_rc in $(( $(date +%s) - t0 )) s"
  cat "$logs/bench.log" | tee -a "$summary" >/dev/null
  echo; cat "$logs/bench.log"
fi
echo
echo "logs: $logs (summary.txt, test.log, bench.log, bench_model.json, bench_hybrid.json, configure.log, build.log, nvidia-smi.txt)"
[ "$test_rc" = 0 ] && [ "$bench_rc" = 0 ]
