// Which form the dense linears take on the GPU (CudaOptions::dense_linears, `--dense-linears`).
// Host-only header, without CUDA: the command line names the forms in every build.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"

namespace k3::cuda {

enum class DenseLinears : uint8_t {
  // The scheme's own GEMM form where it has one (FP8 through cuBLASLt), a bank of one expert where the
  // scheme's entry measured that form at least as fast as bf16 (CudaFormat::dense_bank_by_default),
  // else bf16.
  kAuto,
  // Every packed form the schemes have: also the banks of one expert of GGUF, NVFP4, MXFP4 and
  // ModelSlim W4A8 (bank_linear.h) — the least device memory.
  kPacked,
  // Every dense linear dequantised to bf16.
  kBf16,
};

// The forms' names, in DenseLinears order.
inline const std::vector<std::string>& dense_linears_names() {
  static const std::vector<std::string> names{"auto", "packed", "bf16"};
  return names;
}

// "auto", "packed" or "bf16"; anything else is an error naming `field`.
inline DenseLinears dense_linears_named(const std::string& name, const char* field) {
  const std::vector<std::string>& names = dense_linears_names();
  for (size_t i = 0; i < names.size(); ++i) {
    if (name == names[i]) return static_cast<DenseLinears>(i);
  }
  throw Error(Where{"", "", field}, "'" + name + "' is not one of auto, packed, bf16");
}

}  // namespace k3::cuda
