// A quantization scheme is a value: what the stored bytes of one parameter mean. Kernels are
// chosen by (scheme, backend, shape class); nothing dispatches on file format.
#pragma once

#include <cstdint>
#include <string>

namespace k3 {

enum class SchemeKind : uint8_t {
  Dense,         // BF16 / F16 / F32 stored as is (storage names which)
  Fp8Tensor,     // F8_E4M3 weight × one F32 multiplier (ModelOpt FP8)
  Fp8Block,      // F8_E4M3 weight × F32 multiplier per block_n×block_k tile (FP8_PB_WO, DeepSeek, CT)
  Nvfp4,         // E2M1 nibbles × E4M3 per-16 block scale × F32 global weight_scale_2
  Mxfp4,         // E2M1 nibbles × E8M0 per-32 block scale (compressed-tensors pack-quantized)
  W4A8,          // ModelSlim int4 × per-channel (× per-group) scale; int8 dynamic activations
  W8A8,          // ModelSlim int8 × per-channel scale; int8 activations (dynamic or static)
  Ggml,          // one GGML block type (storage = "Q4_K", …)
  GgmlSplitKvB,  // MLA kv_b as split GGUF k_b (Q4_0) + v_b (Q2_K), ExpertPack only
};

struct Scheme {
  SchemeKind kind = SchemeKind::Dense;
  std::string storage;              // element type of the main tensor: "BF16", "F8_E4M3", "U8", "Q2_K"…
  uint32_t block_n = 0;             // Fp8Block tile rows
  uint32_t block_k = 0;             // Fp8Block tile columns
  uint32_t group_size = 0;          // Nvfp4 16, Mxfp4 32, W4A8 per-group K (0 = per channel only)
  bool int4_packed_along_n = false; // W4A8 "1.0.0" layout: two int4 along N per int8 byte
  bool static_activation = false;   // W8A8 static (input_scale/offset, quant_bias, deq_scale)

  bool operator==(const Scheme&) const = default;
  // Short stable text, e.g. "BF16", "FP8_BLOCK128x128", "NVFP4/g16", "GGUF:Q2_K".
  std::string name() const;
};

const char* scheme_kind_name(SchemeKind kind);

}  // namespace k3
