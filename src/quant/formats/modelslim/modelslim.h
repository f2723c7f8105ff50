// ModelSlim int4 / int8 weights (spec §4.2, §4.3): exact dequant references and the producer
// rules make-tiny quantizes with. materialize() dispatches W4A8 / W8A8 bindings here.
//
// W4A8_DYNAMIC weight codes are signed int4 values q ∈ [-8, 7]:
//  - new layout (description version "1.0.0"): two codes per int8 byte along the OUTPUT dim N,
//    I8 [N/2, K]; byte [r][k] holds rows 2r and 2r+1 of column k (see kW4LowNibbleIsEvenRow);
//  - old layout: one code per int8 byte, I8 [N, K] (see kW4OldLayoutCodeOffset).
// w[n][k] = q[n][k] · weight_scale[n] · weight_scale_second[n][k / group_size]  (second factor
// only when group_size > 0). W8A8 (dynamic and static): w[n][k] = (q[n][k] − weight_offset[n]) · weight_scale[n].
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "quant/plan/plan_files.h"

namespace k3 {

// [UNCONFIRMED] Which N-neighbour sits in the low nibble of a packed byte is not stated by the
// loaders (spec §4.3); Ascend's int4 pack convention puts the even index in the low nibble.
inline constexpr bool kW4LowNibbleIsEvenRow = true;

// [UNCONFIRMED] Old layout: the value stored in each int8 byte is q + kW4OldLayoutCodeOffset.
// The spec's "offset-by-8" (§4.3) is read as the NPU kernel's internal unsigned view, compensated
// by the load-time bias 8·Σ_k q·s2·s — which depends on the codes, so the byte holds the signed
// code itself (offset 0). A decoded code outside [-8, 7] is an error, never wrapped.
inline constexpr int kW4OldLayoutCodeOffset = 0;

inline constexpr int kInt4Min = -8, kInt4Max = 7;

// Codes q [N, K] (each in [-8, 7]) into the packed layout [N/2, K]; N must be even.
void pack_int4_along_n(const int8_t* q, int64_t n, int64_t k, int8_t* packed);
// The inverse: packed [N/2, K] to codes [N, K].
void unpack_int4_along_n(const int8_t* packed, int64_t n, int64_t k, int8_t* q);

// W4A8 reference. weight: packed [N/2, K] or unpacked [N, K] as described above; scale [N];
// scale_second [N, K/group_size] (ignored when group_size == 0). An old-layout code outside
// [-8, 7] throws k3::Error at `where`. The producer's old-layout bytes are codes + the offset.
void dequant_w4a8(const int8_t* weight, bool packed_along_n, const float* scale, const float* scale_second,
                  int64_t group_size, int64_t n, int64_t k, float* out, const Where& where);

// W8A8 reference: weight [N, K], scale [N], offset [N].
void dequant_w8a8(const int8_t* weight, const float* scale, const float* offset, int64_t n, int64_t k, float* out);

// Producer rules (make-tiny). Symmetric, round-to-nearest-even codes; offsets are 0. Scales are
// rounded to their storage type (bf16_scales) BEFORE the codes are computed, so the stored scales
// reproduce the codes' intent exactly. An all-zero row / group gets scale 1.
//  - per channel (group_size 0): weight_scale[n] = amax_n / 7, q = RNE(w / weight_scale[n]);
//  - per group: level 1 weight_scale[n] = amax_n / 127 (the int8 step), level 2
//    weight_scale_second[n][g] = amax_{n,g} / (7 · weight_scale[n]), q = RNE(w / (s1 · s2)).
// Codes saturate to [-8, 7].
struct W4A8Weights {
  std::vector<int8_t> weight;        // packed [N/2, K] or unpacked [N, K]
  std::vector<float> scale;          // [N]
  std::vector<float> scale_second;   // [N, K/group_size]; empty when group_size == 0
  std::vector<float> scale_bias;     // [N]: 8 · Σ_k w_dequant[n][k] (the kernel's compensation term)
};
W4A8Weights quantize_w4a8(const float* w, int64_t n, int64_t k, int64_t group_size, bool packed_along_n,
                          bool bf16_scales);

// weight_scale[n] = amax_n / 127, q = RNE(w / weight_scale[n]) saturated to [-128, 127].
struct W8A8Weights {
  std::vector<int8_t> weight;  // [N, K]
  std::vector<float> scale;    // [N]
};
W8A8Weights quantize_w8a8(const float* w, int64_t n, int64_t k, bool bf16_scales);

// Dequantizes a W4A8 / W8A8 binding (every expert of a bank) into out, row-major in spec.shape.
// Offsets of W4A8 must be zero (symmetric exports); a nonzero one is an error, never ignored.
void dequant_modelslim_binding(const Binding& binding, const ParamSpec& spec, PlanFiles& files, float* out);

// The parts of one W4A8 / W8A8 weight [n, k] (source `e` of each part: the expert of a bank, 0
// otherwise), read and checked as dequant_modelslim_binding reads them; a wrong size or a nonzero
// W4A8 offset is a k3::Error naming the tensor and field.
struct ModelSlimWeight {
  std::span<const uint8_t> weight;  // packed [n/2, k] or unpacked [n, k] int8 bytes
  bool int4 = false, packed_along_n = false;
  int64_t group_size = 0;           // W4A8 per-group K (0: per channel)
  std::vector<float> scale;         // [n]
  std::vector<float> offset;        // [n] (zero for W4A8)
  std::vector<float> scale_second;  // [n, k / group_size] when group_size > 0
  Where where;                      // the weight tensor
};
ModelSlimWeight read_modelslim_weight(const Binding& binding, int64_t n, int64_t k, size_t e, PlanFiles& files);

// The activation parts of W8A8 static, source `e`: input_scale and input_offset (one value each),
// quant_bias I32 [n] and deq_scale [n] (F32, or I64 holding the F32 bits in its low 32 bits, as
// ModelSlim writes it for F16 models).
struct W8A8StaticParts {
  float input_scale = 0.0f, input_offset = 0.0f;
  std::vector<int32_t> quant_bias;
  std::vector<float> deq_scale;
};
W8A8StaticParts read_w8a8_static_parts(const Binding& binding, int64_t n, size_t e, PlanFiles& files);

}  // namespace k3
