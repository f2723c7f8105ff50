// The op-parity harness's CUDA target (cuda_ops.h), compiled only with K3_CUDA: one arena, stream and
// cuBLASLt handle for the process, created on the first op; each op takes its device memory after a
// mark and gives it back when it returns. The ops live in cuda_pointwise.cpp, cuda_linear.cpp and
// cuda_blocks.cpp; cuda_target.cpp registers the target.
#pragma once

#include <memory>

#include "backend/cuda/core/arena.h"
#include "backend/cuda/core/stream.h"
#include "backend/cuda/core/upload.h"
#include "backend/cuda/gemm/gemm.h"
#include "op_parity/cuda_ops.h"

namespace k3::op_parity {

struct CudaDevice {
  cuda::Arena arena;
  cuda::Stream stream;
  cuda::Blas blas;
  int multiprocessors = 0;
  CudaDevice();
};
// Device 0's arena, stream and cuBLASLt (created on first use).
CudaDevice& cuda_device();

// Gives back what an op took from the arena.
class DeviceScope {
 public:
  DeviceScope() : device_(cuda_device()), mark_(device_.arena.mark()) {}
  ~DeviceScope() { device_.arena.reset(mark_); }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  CudaDevice& device() const { return device_; }

 private:
  CudaDevice& device_;
  size_t mark_;
};

// f32 host values [rows, cols] on the device as `dtype`.
cuda::DeviceTensor upload(const std::vector<float>& v, int64_t rows, int64_t cols, cuda::DType dtype, const char* what);
// A device f32 vector (norm weights, score vectors, biases).
const float* upload_vector(const std::vector<float>& v, const char* what);
// Waits for the stream, then the tensor as float.
std::vector<float> download(const cuda::DeviceTensor& t);

class CudaTarget final : public CudaOps {
 public:
  std::string device() const override;
  std::vector<float> linear(const LoadPlan& plan, PlanFiles& files, size_t index, int64_t expert,
                            const std::vector<float>& x, int64_t m, std::string* kernel) override;
  std::vector<float> rms_norm(const std::vector<float>& x, int64_t rows, int64_t cols, const std::vector<float>& w,
                              double eps) override;
  std::vector<float> attn_res_mix_norm(const std::vector<std::vector<float>>& candidates, int64_t rows, int64_t cols,
                                       const std::vector<float>& score, const std::vector<float>& w,
                                       double eps) override;
  std::vector<float> gated_activation(const ActivationConfig& act, const std::vector<float>& gate,
                                      const std::vector<float>& up, int64_t rows, int64_t cols, float gate_alpha,
                                      float up_alpha) override;
  std::vector<float> route(const MoeConfig& m, const std::vector<float>& logits, int64_t rows,
                           const std::vector<float>& bias) override;
  std::vector<float> block(const std::string& op, const K3Config& config, const LoadPlan& plan, PlanFiles& files,
                           int64_t layer, const std::vector<float>& x, int64_t rows, int64_t prefill) override;
};

}  // namespace k3::op_parity
