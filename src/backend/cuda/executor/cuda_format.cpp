#include "backend/cuda/executor/cuda_format.h"

#include "backend/cuda/core/upload.h"
#include "core/error.h"

namespace k3::cuda {

const CudaFormat& cuda_format(SchemeKind kind) {
  switch (kind) {
#define K3_CUDA_FORMAT_CASE(Kind, name) \
  case SchemeKind::Kind:                \
    return cuda_format_##name;
    K3_SCHEME_LIST(K3_CUDA_FORMAT_CASE)
#undef K3_CUDA_FORMAT_CASE
  }
  throw Error("cuda_format: unknown scheme kind " + std::to_string(static_cast<int>(kind)));
}

DeviceVector UploadContext::upload(const std::vector<float>& v, const std::string& name) {
  const DeviceTensor t = upload_f32(arena, v.data(), 1, static_cast<int64_t>(v.size()), DType::kF32, name.c_str());
  bytes += t.bytes();
  return t.as<float>();
}

float* UploadContext::scalar(float value, const std::string& name) {
  float* p = arena.alloc_n<float>(1, name.c_str());
  copy_bytes_to_device(p, &value, sizeof(float));
  bytes += sizeof(float);
  return p;
}

}  // namespace k3::cuda
