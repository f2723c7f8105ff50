// The model on one GPU: weights uploaded once (device_weights.h), per-sequence state in slots (KDA
// recurrent + conv state, the MLA latent cache), and batched forward steps that run model/block_order.h
// with the CUDA kernels. Decode steps (one token per sequence) are captured as CUDA graphs per batch
// size and replayed. `make_cuda_executor` puts it behind the Engine (runtime/engine.h).
// Host-only header.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backend/cuda/attention/mla/mla.h"
#include "backend/cuda/executor/dense_linears.h"
#include "backend/cuda/executor/op_classes.h"
#include "backend/executor.h"
#include "parallel/communicator.h"
#include "parallel/expert_placement.h"
#include "model/routing_skew.h"
#include "parallel/ranks.h"

namespace k3::cuda {

struct CudaOptions {
  int device = 0;
  std::string memory = "90%";      // the arena: bytes, "80G", or a share of the free memory
  int64_t max_sequences = 8;       // state slots: sequences alive at once
  int64_t max_context = 4096;      // tokens per sequence (MLA cache rows per slot; a multiple of 64)
  int64_t max_step_tokens = 8192;  // rows of one forward step (prompt chunks above it are refused)
  // Blocks of 64 positions of the paged MLA latent cache (0: max_sequences × max_context / 64, every
  // sequence at the full context) and KDA state snapshots kept for the prefix cache.
  int64_t kv_blocks = 0;
  int64_t snapshot_slots = 0;
  bool graphs = true;              // replay decode steps as CUDA graphs
  // Routed experts of the formats whose packed kernels take integer activations
  // (CudaFormat::needs_packed_int; validated on the H200 2026-11-29) on those kernels instead of
  // dequantised to bf16 (false: 4× the expert bytes, the bf16 kernels). The other packing formats'
  // experts are always packed.
  bool packed_int_experts = true;
  // The dense linears' form (dense_linears.h): auto takes each scheme's measured choice.
  DenseLinears dense_linears = DenseLinears::kAuto;
  // Expert streaming (docs/cuda-backend.md "Expert streaming"): 0 = off (every routed expert resident), else
  // the device bytes of an LRU expert cache; the routed experts stay in pinned host memory and are
  // copied in as the router picks them. Forces decode CUDA graphs off (each MoE layer reads its picks
  // on the host).
  uint64_t expert_cache_bytes = 0;
  // Routed 4-bit experts under the checkpoint's W4A4 activation contract (w4_expert_bank.h's input
  // quantiser: the GEMM inputs quantised per 16 with each expert's input_scale, as
  // `--activations checkpoint` on the CPU);
  // false: weight-only W4A16 (bf16 activations). A checkpoint without input_scale is an error.
  bool w4a4 = false;
  // Hybrid CPU/GPU experts (docs/cuda-backend.md "Hybrid CPU/GPU experts"): 0 = off, else the routed
  // experts of each MoE layer computed by the CPU (the coldest of cpu_expert_histogram's recorded
  // picks, or the last ones); the GPU holds only the others. Forces decode CUDA graphs off (each MoE
  // layer waits for its picks on the host). Over synthetic weights the CPU's experts are host copies
  // of the generated bf16 banks.
  int64_t experts_on_cpu = 0;
  const RoutingHistogram* cpu_expert_histogram = nullptr;
  MlaDecodeKernel mla_decode = MlaDecodeKernel::kAuto;  // MLA decode attention's kernel (kAuto: by heads)
};

// Checks the options (one-line errors naming the flag) and binds the plan for `options.device`.
// ranks.experts (size > 1): this executor is one expert-parallel rank (docs/cuda-backend.md "Expert
// parallelism"): its GPU holds its split_range of every MoE layer's routed experts, and the ranks'
// partial routed sums are summed over them. ranks.tensor (size > 1): one attention tensor-parallel
// rank (docs/cuda-backend.md "Attention tensor parallelism"): its GPU holds its split_range of the
// KDA and MLA heads and their state, and the heads' outputs are all-gathered before o_proj. Every
// rank must make the same calls. ranks.placement and routing_record are the CPU ranks' (an error here).
std::unique_ptr<Executor> make_cuda_executor(const CudaOptions& options, const K3Config& config, const LoadPlan& plan,
                                             PlanFiles& files, const ParallelRanks& ranks = {});

// The same executor over weights generated on the GPU (synthetic_weights in device_weights.h): no
// checkpoint, for benchmarks at real model shapes (`k3 bench --synthetic`), routing with `routing`'s skew.
std::unique_ptr<Executor> make_synthetic_cuda_executor(const CudaOptions& options, const K3Config& config, uint64_t seed,
                                                       const RoutingSkew& routing = {});

// Statistics of an executor made here (tests and benchmarks): weight bytes, graph replays.
struct CudaExecutorStats {
  uint64_t weight_bytes = 0;        // device bytes of the weights (streamed experts excluded)
  int64_t packed_expert_banks = 0;  // routed-expert banks kept packed by their format (the rest bf16)
  int64_t packed_kv_b_layers = 0;   // MLA layers whose absorbed decode reads a kv_b kept packed (CudaFormat::absorbed_kv_b)
  int64_t graph_replays = 0, graph_captures = 0, eager_steps = 0;
  int64_t packed_prefill_gemms = 0; // packed bank GEMMs (experts, banked dense linears) on a prefill GEMM rather than a decode GEMV, graph replays not counted
  // Expert streaming (zero when off): cache slots (experts), pinned host bytes of the experts,
  // lookups, waves and passes, MoE layer calls (and those needing more than one wave), host→device
  // bytes and the copy stream's time in them.
  bool streaming = false;
  int64_t cache_slots = 0;
  uint64_t cache_bytes = 0, host_expert_bytes = 0;
  int64_t cache_hits = 0, cache_misses = 0, cache_waves = 0, cache_passes = 0;
  int64_t moe_layer_calls = 0, multi_wave_calls = 0;
  uint64_t bytes_copied = 0;
  double copy_seconds = 0;
  double hit_rate() const {
    return cache_hits + cache_misses > 0 ? static_cast<double>(cache_hits) / static_cast<double>(cache_hits + cache_misses) : 0.0;
  }
  double copy_gb_per_s() const { return copy_seconds > 0 ? static_cast<double>(bytes_copied) / copy_seconds / 1e9 : 0.0; }
  // Hybrid CPU/GPU experts (zero when off): experts per MoE layer on the CPU, device bytes of the
  // GPU's banks, MoE layer calls, picks computed on each side, the host's time computing the CPU's
  // picks and waiting for their inputs.
  int64_t cpu_experts_per_layer = 0;
  uint64_t gpu_expert_bytes = 0;  // device bytes of the routed experts this GPU holds (hybrid, expert-parallel)
  int64_t hybrid_layer_calls = 0, cpu_picks = 0, gpu_picks = 0;
  double cpu_expert_seconds = 0, cpu_wait_seconds = 0;
  // Per-op-class profiling (set_cuda_op_profiling): the profiled steps' stream time per op class, and
  // the distinct experts their MoE layer calls picked and the busiest expert's rows, summed over the calls.
  OpSeconds op_seconds{};
  int64_t profiled_steps = 0;
  int64_t touched_experts = 0, profiled_moe_layer_calls = 0;
  int64_t busiest_expert_rows = 0;  // Σ over the calls of the most rows one expert got
};
CudaExecutorStats cuda_executor_stats(const Executor& executor);

// The CUDA device's name, as the driver gives it ("NVIDIA H200").
std::string cuda_device_name(int device);

// Profiles the steps that follow (on) per op class (op_classes.h) into CudaExecutorStats::op_seconds:
// they run eagerly (no CUDA graph), with a CUDA event between op classes and a wait at each step's
// end; the logits are the eager step's. Off: graphs again where the options allow them.
void set_cuda_op_profiling(Executor& executor, bool on);

}  // namespace k3::cuda
