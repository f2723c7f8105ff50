// A quantization scheme is a value: what the stored bytes of one parameter mean. Kernels are
// chosen by (scheme, backend, shape class); nothing dispatches on file format.
#pragma once

#include <cstdint>
#include <string>

#include "quant/formats/scheme_list.h"

namespace k3 {

// One enumerator per entry of K3_SCHEME_LIST (quant/formats/scheme_list.h), in its order.
enum class SchemeKind : uint8_t {
#define K3_SCHEME_ENUMERATOR(kind, name) kind,
  K3_SCHEME_LIST(K3_SCHEME_ENUMERATOR)
#undef K3_SCHEME_ENUMERATOR
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
