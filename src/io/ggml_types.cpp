#include "io/ggml_types.h"

#include <string>

namespace k3 {
namespace {

using T = GgmlType;
constexpr uint32_t kQK = 256;  // K-quant / IQ super-block

constexpr GgmlTypeInfo kTypes[] = {
    {T::F32, "f32", 1, 4},           {T::F16, "f16", 1, 2},
    {T::Q4_0, "q4_0", 32, 18},       {T::Q4_1, "q4_1", 32, 20},
    {T::Q5_0, "q5_0", 32, 22},       {T::Q5_1, "q5_1", 32, 24},
    {T::Q8_0, "q8_0", 32, 34},       {T::Q8_1, "q8_1", 32, 36},
    {T::Q2_K, "q2_K", kQK, 84},      {T::Q3_K, "q3_K", kQK, 110},
    {T::Q4_K, "q4_K", kQK, 144},     {T::Q5_K, "q5_K", kQK, 176},
    {T::Q6_K, "q6_K", kQK, 210},     {T::Q8_K, "q8_K", kQK, 292},
    {T::IQ2_XXS, "iq2_xxs", kQK, 66}, {T::IQ2_XS, "iq2_xs", kQK, 74},
    {T::IQ3_XXS, "iq3_xxs", kQK, 98}, {T::IQ1_S, "iq1_s", kQK, 50},
    {T::IQ4_NL, "iq4_nl", 32, 18},   {T::IQ3_S, "iq3_s", kQK, 110},
    {T::IQ2_S, "iq2_s", kQK, 82},    {T::IQ4_XS, "iq4_xs", kQK, 136},
    {T::I8, "i8", 1, 1},             {T::I16, "i16", 1, 2},
    {T::I32, "i32", 1, 4},           {T::I64, "i64", 1, 8},
    {T::F64, "f64", 1, 8},           {T::IQ1_M, "iq1_m", kQK, 56},
    {T::BF16, "bf16", 1, 2},         {T::TQ1_0, "tq1_0", kQK, 54},
    {T::TQ2_0, "tq2_0", kQK, 66},    {T::MXFP4, "mxfp4", 32, 17},
};

}  // namespace

std::span<const GgmlTypeInfo> ggml_types() { return kTypes; }

const GgmlTypeInfo* find_ggml_type(uint32_t id) {
  for (const auto& info : kTypes) {
    if (static_cast<uint32_t>(info.type) == id) return &info;
  }
  return nullptr;
}

const GgmlTypeInfo* find_ggml_type(std::string_view name) {
  for (const auto& info : kTypes) {
    if (info.name == name) return &info;
  }
  return nullptr;
}

const GgmlTypeInfo& ggml_type_info(uint32_t id, const Where& where) {
  const GgmlTypeInfo* info = find_ggml_type(id);
  if (info == nullptr) throw Error(where, "unknown GGML type id " + std::to_string(id));
  return *info;
}

const GgmlTypeInfo& ggml_type_info(GgmlType type) { return ggml_type_info(static_cast<uint32_t>(type)); }

std::string_view ggml_type_name(GgmlType type) { return ggml_type_info(type).name; }

uint64_t ggml_row_size(GgmlType type, uint64_t ne0, const Where& where) {
  const GgmlTypeInfo& info = ggml_type_info(type);
  if (ne0 % info.block_size != 0) {
    throw Error(where, "ne[0] = " + std::to_string(ne0) + " is not a multiple of the block size " +
                           std::to_string(info.block_size) + " of " + std::string(info.name));
  }
  const uint64_t blocks = ne0 / info.block_size;
  if (blocks > UINT64_MAX / info.type_size) {
    throw Error(where, "row of " + std::to_string(ne0) + " elements of " + std::string(info.name) +
                           " overflows a 64-bit byte count");
  }
  return blocks * info.type_size;
}

}  // namespace k3
