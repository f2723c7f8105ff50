#include "backend/cuda/executor/cpu_experts.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "backend/cpu/block_ops.h"
#include "backend/cuda/core/check.h"
#include "backend/cuda/executor/rows.h"
#include "core/error.h"
#include "core/numeric.h"

namespace k3::cuda {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

template <typename T>
T* pinned(size_t n) {
  void* p = nullptr;
  if (cudaHostAlloc(&p, n * sizeof(T), cudaHostAllocDefault) != cudaSuccess) {
    cudaGetLastError();
    throw Error(Where{"", "", "--experts-on-cpu"}, "cannot pin " + std::to_string(n * sizeof(T)) + " bytes of host staging");
  }
  return static_cast<T*>(p);
}

// A device matrix (rows of `cols` elements, `ld` apart) to dense host memory, on `stream`.
void copy_to_host(void* dst, const DeviceTensor& src, cudaStream_t stream) {
  const size_t row = static_cast<size_t>(src.cols) * dtype_size(src.dtype);
  K3_CUDA_CHECK(cudaMemcpy2DAsync(dst, row, src.data, static_cast<size_t>(src.ld) * dtype_size(src.dtype), row,
                                  static_cast<size_t>(src.rows), cudaMemcpyDeviceToHost, stream));
}

}  // namespace

CpuExperts::CpuExperts(const K3Config& config, std::vector<std::vector<bool>> on_cpu,
                       std::vector<CpuHandles::Experts> cpu_banks)
    : activation_(config.activation), on_cpu_(std::move(on_cpu)), cpu_banks_(std::move(cpu_banks)) {
  if (!config.moe) throw Error(Where{"", "", "--experts-on-cpu"}, "the model has no routed experts");
  experts_ = config.moe->num_experts;
  top_k_ = config.moe->experts_per_token;
  const size_t layers = static_cast<size_t>(config.num_layers);
  if (cpu_banks_.empty()) cpu_banks_.resize(layers);
  if (on_cpu_.size() != layers || cpu_banks_.size() != layers) throw Error("CpuExperts: one entry per layer expected");
  for (int64_t l = 0; l < config.num_layers; ++l) {
    if (!config.is_moe(l)) continue;
    const std::vector<bool>& mine = on_cpu_[static_cast<size_t>(l)];
    if (static_cast<int64_t>(mine.size()) != experts_) throw Error("CpuExperts: one flag per expert expected");
    stats_.per_layer = std::count(mine.begin(), mine.end(), true);
    CpuHandles::Experts& bank = cpu_banks_[static_cast<size_t>(l)];
    for (auto* w : {&bank.w1, &bank.w3, &bank.w2}) w->resize(static_cast<size_t>(experts_));
  }
  K3_CUDA_CHECK(cudaEventCreateWithFlags(&inputs_ready_, cudaEventDisableTiming));
}

CpuExperts::~CpuExperts() {
  if (inputs_ready_ != nullptr) cudaEventDestroy(inputs_ready_);
  for (void* p : {static_cast<void*>(ids_), static_cast<void*>(weights_), static_cast<void*>(rows_), static_cast<void*>(sum_)}) {
    if (p != nullptr) cudaFreeHost(p);
  }
}

void CpuExperts::bind(int64_t layer, int64_t expert, CpuHandles::Linear w1, CpuHandles::Linear w3, CpuHandles::Linear w2) {
  if (layer < 0 || layer >= static_cast<int64_t>(on_cpu_.size()) || on_cpu_[static_cast<size_t>(layer)].empty() ||
      expert < 0 || expert >= experts_ || !on_cpu(layer, expert)) {
    throw Error("CpuExperts: expert " + std::to_string(expert) + " of layer " + std::to_string(layer) + " is not one of the CPU's");
  }
  // A gated MLP: w1 and w3 [I, D], w2 [D, I].
  if (!w1 || !w3 || !w2 || w1->rows() != w3->rows() || w1->cols() != w3->cols() || w2->rows() != w1->cols() ||
      w2->cols() != w1->rows()) {
    const auto dims = [](const CpuHandles::Linear& w) {
      return w ? std::to_string(w->rows()) + "x" + std::to_string(w->cols()) : std::string("none");
    };
    throw Error("CpuExperts: expert " + std::to_string(expert) + " of layer " + std::to_string(layer) +
                " is not a gated MLP: w1 " + dims(w1) + ", w3 " + dims(w3) + ", w2 " + dims(w2));
  }
  CpuHandles::Experts& bank = cpu_banks_[static_cast<size_t>(layer)];
  bank.w1[static_cast<size_t>(expert)] = std::move(w1);
  bank.w3[static_cast<size_t>(expert)] = std::move(w3);
  bank.w2[static_cast<size_t>(expert)] = std::move(w2);
}

void CpuExperts::reserve(int64_t tokens, int64_t width) {
  if (tokens <= capacity_tokens_ && width <= capacity_width_) return;
  K3_CUDA_CHECK(cudaDeviceSynchronize());  // no copy may still use the old staging
  for (void* p : {static_cast<void*>(ids_), static_cast<void*>(weights_), static_cast<void*>(rows_), static_cast<void*>(sum_)}) {
    if (p != nullptr) cudaFreeHost(p);
  }
  ids_ = nullptr, weights_ = nullptr, rows_ = nullptr, sum_ = nullptr;
  capacity_tokens_ = std::max(tokens, capacity_tokens_);
  capacity_width_ = std::max(width, capacity_width_);
  const size_t picks = static_cast<size_t>(capacity_tokens_ * top_k_), cells = static_cast<size_t>(capacity_tokens_ * capacity_width_);
  ids_ = pinned<int32_t>(picks);
  weights_ = pinned<float>(picks);
  rows_ = pinned<uint16_t>(cells);
  sum_ = pinned<float>(cells);
}

void CpuExperts::begin(int64_t layer, const DeviceTensor& z, const DeviceTensor& ids, const DeviceTensor& weights,
                       cudaStream_t stream) {
  expect_dtype(z, DType::kBF16, "hybrid experts input rows");
  expect_dtype(ids, DType::kI32, "hybrid experts ids");
  expect_dtype(weights, DType::kF32, "hybrid experts weights");
  expect_shape(weights, ids.rows, ids.cols, "hybrid experts weights");
  reserve(ids.rows, z.cols);
  layer_ = layer, tokens_ = ids.rows, width_ = z.cols;
  copy_to_host(ids_, ids, stream);
  copy_to_host(weights_, weights, stream);
  copy_to_host(rows_, z, stream);
  K3_CUDA_CHECK(cudaEventRecord(inputs_ready_, stream));
}

void CpuExperts::finish(const DeviceTensor& routed, Arena& arena, cudaStream_t stream) {
  expect_dtype(routed, DType::kF32, "hybrid experts routed sum");
  expect_shape(routed, tokens_, width_, "hybrid experts routed sum");
  const auto t0 = std::chrono::steady_clock::now();
  K3_CUDA_CHECK(cudaEventSynchronize(inputs_ready_));
  const auto t1 = std::chrono::steady_clock::now();
  stats_.wait_seconds += seconds_since(t0);
  ++stats_.layer_calls;
  const std::vector<bool>& mine = on_cpu_[static_cast<size_t>(layer_)];
  cpu::Routing routing(static_cast<size_t>(tokens_));
  int64_t cpu_picks = 0;
  for (int64_t t = 0; t < tokens_; ++t) {
    for (int64_t j = 0; j < top_k_; ++j) {
      const int32_t e = ids_[t * top_k_ + j];
      if (e >= 0 && e < experts_ && mine[static_cast<size_t>(e)]) {
        // add_routed_experts skips an unbound expert: that would drop the pick silently.
        if (!cpu_banks_[static_cast<size_t>(layer_)].w1[static_cast<size_t>(e)]) {
          throw Error("hybrid experts: expert " + std::to_string(e) + " of layer " + std::to_string(layer_) +
                      " is the CPU's but was never bound");
        }
        routing[static_cast<size_t>(t)].push_back({e, weights_[t * top_k_ + j]});
        ++cpu_picks;
      }
    }
  }
  stats_.cpu_picks += cpu_picks;
  stats_.gpu_picks += tokens_ * top_k_ - cpu_picks;
  if (cpu_picks == 0) return;
  Tensor z(tokens_, width_), sum(tokens_, width_);
  for (size_t i = 0; i < z.data.size(); ++i) z.data[i] = decode_bf16(rows_[i]);
  cpu::add_routed_experts(activation_, cpu_banks_[static_cast<size_t>(layer_)], z, routing, sum);
  std::memcpy(sum_, sum.data.data(), sum.data.size() * sizeof(float));
  const DeviceTensor part = arena.alloc_tensor(DType::kF32, tokens_, width_, "cpu experts' routed sum");
  K3_CUDA_CHECK(cudaMemcpyAsync(part.data, sum_, part.bytes(), cudaMemcpyHostToDevice, stream));
  add_rows(routed, part, stream);
  stats_.cpu_seconds += seconds_since(t1);
}

}  // namespace k3::cuda
