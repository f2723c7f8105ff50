// Which form the dense linears take on the GPU (CudaOptions::dense_linears, `--dense-linears`: the
// command line lists the same names, tools/model_args.h dense_linears_flag_values). Host-only header.
#pragma once

#include <cstdint>
#include <string>

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

// "auto", "packed" or "bf16" (DenseLinears order); anything else is an error naming `field`.
inline DenseLinears dense_linears_named(const std::string& name, const char* field) {
  static const char* const kNames[] = {"auto", "packed", "bf16"};
  for (uint8_t i = 0; i < 3; ++i) {
    if (name == kNames[i]) return static_cast<DenseLinears>(i);
  }
  throw Error(Where{"", "", field}, "'" + name + "' is not one of auto, packed, bf16");
}

}  // namespace k3::cuda
