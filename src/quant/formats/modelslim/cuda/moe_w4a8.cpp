// Host side of the W4A8 expert GEMM (moe_w4a8.h): the repack into the bank layout
// (moe_w4a8_layout.h), bank allocation and upload, the kernel choice and the checks before a launch.
#include "quant/formats/modelslim/cuda/moe_w4a8.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/core/check.h"
#include "quant/formats/modelslim/cuda/moe_w4a8_internal.h"
#include "quant/formats/modelslim/cuda/moe_w4a8_layout.h"
#include "quant/formats/modelslim/cuda/moe_w4a8_tuning.h"
#include "backend/cuda/core/upload.h"
#include "quant/formats/modelslim/modelslim.h"

namespace k3::cuda {
namespace {

// Largest scale group: the int32 sums of 16·q·c (|16·q·c| ≤ 16·8·127) stay exact up to 2^31 / 16256.
constexpr int64_t kMaxGroup = 65536;

// Columns per scale for a checkpoint group_size (0: per channel), checked against K.
int64_t scale_group(int64_t group_size, int64_t k, const char* what) {
  const int64_t g = group_size > 0 ? group_size : k;
  if (k <= 0 || k % w4a8::kChunk != 0 || g % w4a8::kChunk != 0 || k % g != 0 || g > kMaxGroup) {
    throw Error(std::string(what) + ": needs K % 64 == 0 and a scale group (group_size, or K per channel) that is a"
                " multiple of 64 dividing K, at most " + std::to_string(kMaxGroup) + "; got K " + std::to_string(k) +
                ", group_size " + std::to_string(group_size));
  }
  return g;
}

int8_t sign_extend4(uint32_t nibble) { return static_cast<int8_t>(static_cast<int8_t>(nibble << 4) >> 4); }

}  // namespace

void moe_w4a8_repack(const int8_t* weight, bool packed_along_n, const float* scale, const float* scale_second,
                     int64_t group_size, int64_t rows, int64_t k, uint8_t* dst_codes, float* dst_scales) {
  if (rows < 0 || rows % w4a8::kRowGroup != 0) {
    throw Error("moe_w4a8_repack: needs rows % 16 == 0, got " + std::to_string(rows));
  }
  const int64_t group = scale_group(group_size, k, "moe_w4a8_repack"), groups = k / group, chunks = k / w4a8::kChunk;
  auto code = [&](int64_t r, int64_t c) -> int {
    if (packed_along_n) {
      const auto byte = static_cast<uint8_t>(weight[(r / 2) * k + c]);
      const bool low = (r % 2 == 0) == kW4LowNibbleIsEvenRow;
      return sign_extend4(low ? byte & 0xFu : byte >> 4);
    }
    const int v = weight[r * k + c] - kW4OldLayoutCodeOffset;
    if (v < kInt4Min || v > kInt4Max) {
      throw Error("moe_w4a8_repack: int4 code " + std::to_string(v) + " at [" + std::to_string(r) + ", " +
                  std::to_string(c) + "] is outside [-8, 7] (old W4A8 layout stores one signed int4 per int8)");
    }
    return v;
  };
  for (int64_t g0 = 0; g0 < rows; g0 += w4a8::kRowGroup) {
    const int64_t grp = g0 / w4a8::kRowGroup;
    for (int64_t c = 0; c < chunks; ++c) {
      uint8_t* dc = dst_codes + (grp * chunks + c) * w4a8::kChunkCodeBytes;
      for (int lane = 0; lane < 32; ++lane) {
        for (int w = 0; w < 4; ++w) {
          for (int b = 0; b < 4; ++b) {
            const int64_t col = c * w4a8::kChunk + w4a8::fragment_col(lane, w, b);
            const int lo = code(g0 + w4a8::fragment_row(lane, 0), col), hi = code(g0 + w4a8::fragment_row(lane, 1), col);
            dc[lane * 16 + w * 4 + b] = static_cast<uint8_t>((static_cast<uint32_t>(hi) & 0xFu) << 4 |
                                                             (static_cast<uint32_t>(lo) & 0xFu));  // little-endian word
          }
        }
      }
    }
    for (int64_t j = 0; j < groups; ++j) {
      for (int r = 0; r < w4a8::kRowGroup; ++r) {
        const int64_t row = g0 + r;
        dst_scales[(grp * groups + j) * w4a8::kRowGroup + w4a8::scale_slot(r)] =
            group_size > 0 ? scale[row] * scale_second[row * groups + j] : scale[row];
      }
    }
  }
}

MoeW4A8Bank moe_w4a8_alloc(Arena& arena, int64_t experts, int64_t n, int64_t k, int64_t group_size, int64_t parts,
                           const char* what) {
  const std::string where = std::string("moe_w4a8_alloc ") + what;
  if (experts <= 0 || parts <= 0 || n <= 0 || n % (w4a8::kRowGroup * parts) != 0) {
    throw Error(where + ": needs N % (16·parts) == 0, got E " + std::to_string(experts) + ", N " + std::to_string(n) +
                ", parts " + std::to_string(parts));
  }
  MoeW4A8Bank b;
  b.experts = experts, b.n = n, b.k = k, b.parts = parts;
  scale_group(group_size, k, where.c_str());
  b.group_size = group_size;
  b.codes = static_cast<uint8_t*>(arena.alloc(b.code_bytes(), what));
  b.scales = arena.alloc_n<float>(b.scale_count(), what);
  b.out_scale = arena.alloc_n<float>(static_cast<size_t>(experts * parts), what);
  return b;
}

void moe_w4a8_upload_rows(const MoeW4A8Bank& bank, int64_t row0, const int8_t* weight, bool packed_along_n,
                          const float* scale, const float* scale_second, int64_t rows) {
  if (row0 < 0 || row0 % w4a8::kRowGroup != 0 || rows < 0 || row0 + rows > bank.rows()) {
    throw Error("moe_w4a8_upload_rows: rows [" + std::to_string(row0) + ", " + std::to_string(row0 + rows) +
                ") outside the bank or not 16-aligned");
  }
  std::vector<uint8_t> c(static_cast<size_t>(rows * bank.k / 2));
  std::vector<float> s(static_cast<size_t>(rows * bank.groups()));
  moe_w4a8_repack(weight, packed_along_n, scale, scale_second, bank.group_size, rows, bank.k, c.data(), s.data());
  copy_bytes_to_device(bank.codes + row0 * bank.k / 2, c.data(), c.size());
  copy_bytes_to_device(bank.scales + row0 * bank.groups(), s.data(), s.size() * sizeof(float));
}

void moe_w4a8_upload_out_scale(const MoeW4A8Bank& bank, const float* host) {
  copy_bytes_to_device(bank.out_scale, host, static_cast<size_t>(bank.experts * bank.parts) * sizeof(float));
}

MoeTile moe_w4a8_tile_for(int64_t rows, int64_t experts) {
  return rows <= 16 * std::max<int64_t>(experts, 1) ? MoeTile::kM16 : MoeTile::kM64;
}

void moe_grouped_gemm_w4a8(const Int8Rows& xs, const MoeW4A8Bank& w, const MoeDispatch& d, const DeviceTensor& ys,
                           cudaStream_t stream, MoeTile tile) {
  const int64_t R = d.rows(), K = w.k, N = w.n;
  expect_dtype(xs.codes, DType::kU8, "moe_grouped_gemm_w4a8 xs");
  expect_shape(xs.codes, R, K, "moe_grouped_gemm_w4a8 xs");
  expect_shape(ys, R, N, "moe_grouped_gemm_w4a8 ys");
  if (xs.scale == nullptr) throw Error("moe_grouped_gemm_w4a8: xs has no scales");
  if (w.experts != d.experts) {
    throw Error("moe_grouped_gemm_w4a8: bank has " + std::to_string(w.experts) + " experts, dispatch " +
                std::to_string(d.experts));
  }
  if (w.codes == nullptr || w.scales == nullptr || w.out_scale == nullptr) throw Error("moe_grouped_gemm_w4a8: empty bank");
  if (N % (w4a8::kRowGroup * w.parts) != 0 || N > INT32_MAX / 2 || K > INT32_MAX / 2) {
    throw Error("moe_grouped_gemm_w4a8: needs N % (16·parts) == 0, got N " + std::to_string(N));
  }
  scale_group(w.group_size, K, "moe_grouped_gemm_w4a8");
  for (const DeviceTensor* t : {&xs.codes, &ys}) {
    if (!rows_aligned16(*t)) throw Error("moe_grouped_gemm_w4a8: needs 16-byte aligned rows, got " + t->describe());
  }
  if (ys.dtype != DType::kF32 && ys.dtype != DType::kBF16) {
    throw Error("moe_grouped_gemm_w4a8: ys must be f32 or bf16, got " + ys.describe());
  }
  if (tile == MoeTile::kAuto) tile = moe_w4a8_tile_for(R, moe_choice_experts(d));
  if (tile == MoeTile::kM128) throw Error("moe_grouped_gemm_w4a8: no kM128 kernel");
  const MoeTileMap map = moe_tile_map(d, tile);
  if (R == 0) return;
  const w4a8::GemmArgs a{static_cast<const int8_t*>(xs.codes.data), xs.codes.ld, xs.scale, w.codes, w.scales,
                         w.out_scale, ys.data, ys.ld, static_cast<int>(N), static_cast<int>(K), static_cast<int>(w.group()),
                         static_cast<int>(N / w.parts), static_cast<int>(w.parts), d.expert_offsets, d.row_weight};
  w4a8::launch_gemm(tile, ys.dtype == DType::kF32, w.groups() > 1, a, map, stream);
}

void moe_grouped_gemm_w4a8(const Int8Rows& xs, const MoeW4A8Bank& w, const MoeDispatch& d, const DeviceTensor& ys,
                           cudaStream_t stream) {
  moe_grouped_gemm_w4a8(xs, w, d, ys, stream, MoeTile::kAuto);
}

}  // namespace k3::cuda
