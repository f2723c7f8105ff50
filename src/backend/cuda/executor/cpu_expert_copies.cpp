#include "backend/cuda/executor/cpu_expert_copies.h"

#include <cuda_runtime.h>

#include <span>
#include <string>

#include "backend/cpu/cpu_linear.h"
#include "backend/cpu/kernels/float_matrix.h"
#include "backend/cuda/core/check.h"
#include "core/error.h"

namespace k3::cuda {
namespace {

// Rows [first, first + count) of a bf16 bank, to host memory.
std::shared_ptr<const std::vector<uint16_t>> host_rows(const DeviceTensor& bank, int64_t first, int64_t count) {
  auto host = std::make_shared<std::vector<uint16_t>>(static_cast<size_t>(count * bank.cols));
  const size_t row = static_cast<size_t>(bank.cols) * sizeof(uint16_t);
  const auto* base = static_cast<const uint8_t*>(bank.data) + static_cast<size_t>(first * bank.ld) * sizeof(uint16_t);
  K3_CUDA_CHECK(cudaMemcpy2D(host->data(), row, base, static_cast<size_t>(bank.ld) * sizeof(uint16_t), row,
                             static_cast<size_t>(count), cudaMemcpyDeviceToHost));
  return host;
}

// Rows [first, first + count) of a host bf16 matrix of `cols` columns as a CPU linear that keeps the
// bytes alive.
CpuHandles::Linear cpu_linear(const std::shared_ptr<const std::vector<uint16_t>>& host, int64_t first, int64_t count,
                              int64_t cols) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(host->data() + first * cols);
  const std::span<const uint8_t> span(bytes, static_cast<size_t>(count * cols) * sizeof(uint16_t));
  return cpu::make_kernel_linear(cpu::make_half_matrix(span, true, count, cols, host, cpu::selected_isa()));
}

}  // namespace

CpuExpertCopies::CpuExpertCopies(const K3Config& config, ExpertBankSink& gpu_share, CpuExperts& cpu)
    : config_(config), gpu_share_(gpu_share), cpu_(cpu) {}

uint64_t CpuExpertCopies::keep(int64_t layer, int role, const DeviceExperts& bank) {
  if (bank.packed()) throw Error("hybrid experts over synthetic weights: the generated banks are bf16, got a packed bank");
  expect_dtype(bank.bf16, DType::kBF16, "synthetic expert bank");
  const int64_t E = config_.moe->num_experts;
  if (bank.bf16.rows % E != 0) throw Error("hybrid experts over synthetic weights: a bank's rows are not E · rows per expert");
  const int64_t rows = bank.bf16.rows / E, cols = bank.bf16.cols;
  if (role == 0) {
    pending_layer_ = layer;
    pending_w13_cols_ = cols;
    pending_w13_.assign(static_cast<size_t>(E), nullptr);
    for (int64_t e = 0; e < E; ++e) {
      if (!cpu_.on_cpu(layer, e)) continue;
      pending_w13_[static_cast<size_t>(e)] = host_rows(bank.bf16, e * rows, rows);
    }
  } else {
    if (pending_layer_ != layer) throw Error("hybrid experts over synthetic weights: layer " + std::to_string(layer) + "'s w2 came before its w13");
    for (int64_t e = 0; e < E; ++e) {
      const std::shared_ptr<const std::vector<uint16_t>>& w13 = pending_w13_[static_cast<size_t>(e)];
      if (w13 == nullptr) continue;
      // w13: [w1 ; w3], I rows each of the w13 bank's width (the expert's input, D); w2: [D, I].
      const int64_t d = pending_w13_cols_, inter = static_cast<int64_t>(w13->size()) / d / 2;
      const std::shared_ptr<const std::vector<uint16_t>> w2 = host_rows(bank.bf16, e * rows, rows);
      cpu_.bind(layer, e, cpu_linear(w13, 0, inter, d), cpu_linear(w13, inter, inter, d), cpu_linear(w2, 0, rows, cols));
    }
    pending_layer_ = -1;
    pending_w13_.clear();
  }
  return gpu_share_.keep(layer, role, bank);
}

}  // namespace k3::cuda
