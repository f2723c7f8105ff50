#include "cuda_target.h"

#include <cuda_runtime.h>

#include <stdexcept>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/device.h"

namespace k3::op_parity {
namespace {

// Enough for every case: the largest is a tiny checkpoint's weights (tens of MiB) plus cuBLASLt's
// workspace and a block's scratch.
constexpr size_t kArenaBytes = size_t{2} << 30;

int device_multiprocessors() {
  cudaDeviceProp prop{};
  K3_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  return prop.multiProcessorCount;
}

// Registers the target before main (the harness asks cuda_ops() when it lists its targets).
[[maybe_unused]] const bool registered = [] {
  register_cuda_ops(std::make_unique<CudaTarget>());
  return true;
}();

}  // namespace

CudaDevice::CudaDevice() : arena(0, kArenaBytes), stream(), blas(arena), multiprocessors(device_multiprocessors()) {}

CudaDevice& cuda_device() {
  static CudaDevice device;
  return device;
}

std::string CudaTarget::device() const {
  static const std::string name = [] {
    const std::vector<cuda::DeviceInfo> devices = cuda::list_devices();
    return devices.empty() ? std::string() : devices[0].name;
  }();
  return name;
}

cuda::DeviceTensor upload(const std::vector<float>& v, int64_t rows, int64_t cols, cuda::DType dtype, const char* what) {
  if (static_cast<int64_t>(v.size()) != rows * cols) throw std::logic_error(std::string(what) + ": size mismatch");
  return cuda::upload_f32(cuda_device().arena, v.data(), rows, cols, dtype, what);
}

const float* upload_vector(const std::vector<float>& v, const char* what) {
  return upload(v, 1, static_cast<int64_t>(v.size()), cuda::DType::kF32, what).as<float>();
}

std::vector<float> download(const cuda::DeviceTensor& t) {
  cuda_device().stream.sync();
  return cuda::download_f32(t);
}

}  // namespace k3::op_parity
