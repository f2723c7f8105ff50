// Factories of the CPU weight formats (weight_matrix.h), one source file each. Each takes the
// bytes of one 2-D weight [rows, cols] as the checkpoint stores it; `keep_alive` owns the mapping
// when the format reads the bytes in place (zero-copy), otherwise the bytes are repacked at load.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "backend/cpu/kernels/weight_matrix.h"
#include "io/ggml_types.h"

namespace k3::cpu {

using KeepAlive = std::shared_ptr<const void>;

// float32 weights (owned): dequantised fallbacks and tests.
std::unique_ptr<WeightMatrix> make_f32_matrix(std::vector<float> w, int64_t rows, int64_t cols, CpuIsa isa);
// BF16 or F16 weights read in place ("BF16" / "F16"); F32 activations.
std::unique_ptr<WeightMatrix> make_half_matrix(std::span<const uint8_t> w, bool is_bf16, int64_t rows, int64_t cols,
                                               KeepAlive keep_alive, CpuIsa isa);
// FP8 E4M3 codes [rows, cols] read in place × float multipliers per block_n×block_k tile, scale
// row-major [cdiv(rows, block_n), cdiv(cols, block_k)] (per tensor: block_n = rows, block_k = cols).
// Activations f32, or with `a8` the checkpoint's FP8 activation contract (prepare_fp8): static with
// input_scale > 0 (ModelOpt FP8), else dynamic per token and 1×128 block (FP8_PB_WO, DeepSeek).
struct Fp8Options {
  bool a8 = false;
  float input_scale = 0.0f;
};
std::unique_ptr<WeightMatrix> make_fp8_matrix(std::span<const uint8_t> codes, std::vector<float> scale, int64_t block_n,
                                              int64_t block_k, int64_t rows, int64_t cols, KeepAlive keep_alive,
                                              CpuIsa isa, const Fp8Options& options = {});
// E2M1 codes two per byte along K (element 2i in the low nibble) [rows, cols/2] with one scale
// byte per `block` columns [rows, cols/block]: NVFP4 (E4M3 per 16, global weight_scale_2 as
// output_scale) or MXFP4 (E8M0 per 32, output_scale 1). Repacked at load into fp4_dot.h's layout.
// Activations: bf16 (weight-only, default) or, with w4a4, the checkpoint's NVFP4 activation
// contract: x quantised per 16 with the static input_scale as global factor (spec §2.3), the
// input_scale then joining output_scale.
struct Fp4Options {
  bool w4a4 = false;
  float input_scale = 1.0f;
};
// The W4A4 activation values of one token of k values (k % 16 == 0): per 16, sf = e4m3(amax / 6 /
// input_scale) and out = e2m1(x / input_scale / sf) · sf — the code times its block scale, with the
// static input_scale left out (it joins the output scale). The CUDA backend's NVFP4 activation
// quantisation is tested against this, bit for bit.
void nvfp4_activation_values(const float* x, int64_t k, float input_scale, float* out);
std::unique_ptr<WeightMatrix> make_fp4_matrix(std::span<const uint8_t> packed, std::span<const uint8_t> scales,
                                              bool nvfp4, float output_scale, int64_t rows, int64_t cols, CpuIsa isa,
                                              const Fp4Options& options = {});
// GGML blocks of `type`, rows of the native layout read in place (GGUF / ExpertPack experts are
// never copied); activations quantised as ggml's vec_dot_type of that type.
std::unique_ptr<WeightMatrix> make_ggml_matrix(GgmlType type, std::span<const uint8_t> blocks, int64_t rows,
                                               int64_t cols, KeepAlive keep_alive, CpuIsa isa);

// ModelSlim W4A8 (quant-formats §4.3): int4 codes q ∈ [-8, 7], two per byte along N ([rows/2,
// cols], packed_along_n, modelslim.h's nibble order) or one per byte ([rows, cols]; a code outside
// [-8, 7] is an error); w = q · scale[n] (· scale_second[n][k / group_size] when group_size > 0,
// a multiple of 16). Activations int8, dynamic per token. Repacked at load into int8_dot.h's layout.
std::unique_ptr<WeightMatrix> make_w4a8_matrix(std::span<const int8_t> weight, bool packed_along_n, std::vector<float> scale,
                                               std::vector<float> scale_second, int64_t group_size, int64_t rows,
                                               int64_t cols, CpuIsa isa);
// ModelSlim W8A8 (§4.2): codes [rows, cols], w = (q − offset[n]) · scale[n] (integer offsets).
// Activations int8: dynamic per token, or static: code = clamp(round(x / scale) + offset, -128, 127)
// with the values (code − offset) · scale (prepare_int8_static).
struct W8A8StaticInput {
  float scale = 1.0f;  // input_scale
  int32_t offset = 0;  // input_offset
};
std::unique_ptr<WeightMatrix> make_w8a8_matrix(std::span<const int8_t> weight, std::vector<float> scale,
                                               std::vector<float> offset, std::optional<W8A8StaticInput> static_input,
                                               int64_t rows, int64_t cols, CpuIsa isa);

}  // namespace k3::cpu
