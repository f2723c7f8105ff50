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

// The kind and the parameters of its variant; each scheme's folder says which fields it uses
// (its plan entry, quant/plan/plan_format.h, names them in Scheme::name()).
struct Scheme {
  SchemeKind kind = SchemeKind::Dense;
  std::string storage;              // element type of the main tensor: "BF16", "U8", "Q2_K"…
  uint32_t block_n = 0;             // tile rows of a per-tile scale
  uint32_t block_k = 0;             // tile columns of a per-tile scale
  uint32_t group_size = 0;          // elements of K per scale (0 = per channel only)
  bool int4_packed_along_n = false; // two int4 codes along N per int8 byte
  bool static_activation = false;   // static activation quantization: its parts are bound too

  bool operator==(const Scheme&) const = default;
  // Short stable text, e.g. "BF16" or a kind with its parameters: the text of `k3 check`.
  std::string name() const;
};

const char* scheme_kind_name(SchemeKind kind);

}  // namespace k3
