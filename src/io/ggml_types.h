// GGML tensor types as stored in GGUF files: numeric ids, names, block geometry.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "core/error.h"

namespace k3 {

// Numeric values are GGUF's on-disk type ids. Ids ggml retired (4, 5, 31-33, 36-38) are absent.
enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
};

struct GgmlTypeInfo {
  GgmlType type;
  std::string_view name;  // ggml's spelling, e.g. "q4_K", "bf16", "mxfp4"
  uint32_t block_size;    // elements per block
  uint32_t type_size;     // bytes per block
};

// Every known type, in id order.
std::span<const GgmlTypeInfo> ggml_types();

// nullptr when ggml defines no type with this id / name.
const GgmlTypeInfo* find_ggml_type(uint32_t id);
const GgmlTypeInfo* find_ggml_type(std::string_view name);

// Throws k3::Error at `where`: "unknown GGML type id N".
const GgmlTypeInfo& ggml_type_info(uint32_t id, const Where& where = {});
const GgmlTypeInfo& ggml_type_info(GgmlType type);
std::string_view ggml_type_name(GgmlType type);

// Bytes of one row of ne0 elements. Throws at `where` (field 'ne[0]') when ne0 is not a multiple
// of the block size.
uint64_t ggml_row_size(GgmlType type, uint64_t ne0, const Where& where = {});

}  // namespace k3
