// Host side of the 4-bit expert GEMMs (moe_w4.h): the repack into the bank layout
// (moe_w4_layout.h), bank allocation and upload, the kernel choice and the checks before a launch.
#include "backend/cuda/moe/moe_w4.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/device.h"
#include "backend/cuda/moe/moe_w4_internal.h"
#include "backend/cuda/moe/moe_w4_layout.h"
#include "backend/cuda/core/tensor_map.h"
#include "backend/cuda/core/upload.h"
#include "core/numeric.h"

namespace k3::cuda {
namespace {

const w4::FormatBits& format_bits(W4Format f) { return f == W4Format::kNvfp4 ? w4::kNvfp4Bits : w4::kMxfp4Bits; }

// A checkpoint block scale in the bank's terms: the stored byte, and what happens to the block's codes.
struct BlockScale {
  uint8_t byte = 0;
  uint8_t code_xor = 0;  // 8: flip the codes' signs (negative NVFP4 scale)
  bool zero = false;     // zero scale: the block's codes become 0
};

BlockScale bank_scale(W4Format f, uint8_t s) {
  BlockScale b;
  if (f == W4Format::kMxfp4) {
    if (s == 0xFF) throw Error("moe_w4_repack: MXFP4 scale is NaN (E8M0 0xFF)");
    if (s > w4::kMxfp4MaxExponent) {
      throw Error("moe_w4_repack: MXFP4 scale 2^" + std::to_string(static_cast<int>(s) - 127) +
                  " above the supported 2^8");
    }
    b.byte = s;
    return b;
  }
  const float v = decode_e4m3fn(s);
  if (std::isnan(v)) throw Error("moe_w4_repack: NVFP4 block scale is NaN (E4M3 0x7F/0xFF)");
  if (v == 0.0f) {
    b.zero = true;
    b.byte = 9 << 3;  // 1.0
    return b;
  }
  if (v < 0.0f) b.code_xor = 8;
  int x = 0;
  const float frac = std::frexp(std::fabs(v), &x);  // |v| = frac·2^x, frac in [0.5, 1)
  const int mant = static_cast<int>(frac * 16.0f) - 8;  // |v| = 2^(x−1)·(1 + mant/8), exact
  b.byte = static_cast<uint8_t>(((x - 1 + 9) << 3) | mant);
  return b;
}

}  // namespace

const char* w4_format_name(W4Format f) { return f == W4Format::kNvfp4 ? "nvfp4" : "mxfp4"; }
int w4_group(W4Format f) { return format_bits(f).group; }

void moe_w4_repack(W4Format f, const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t k,
                   uint8_t* dst_codes, uint8_t* dst_scales) {
  const w4::FormatBits& fb = format_bits(f);
  if (rows % w4::kRowGroup != 0 || k % w4::kChunk != 0 || rows < 0 || k <= 0) {
    throw Error("moe_w4_repack: needs rows % 16 == 0 and K % 64 == 0, got " + std::to_string(rows) + " × " +
                std::to_string(k));
  }
  const int64_t chunks = k / w4::kChunk, blocks = k / fb.group;
  const int bpc = w4::blocks_per_chunk(fb), sbytes = w4::scale_bytes_per_chunk(fb);
  // Every scale checked first (the errors), so that the repack below, parallel over row groups (a
  // whole Kimi-K3 bank is gigabytes), cannot throw inside the parallel region.
  for (int64_t i = 0; i < rows * blocks; ++i) bank_scale(f, scales[i]);
#pragma omp parallel for schedule(static)
  for (int64_t g0 = 0; g0 < rows; g0 += w4::kRowGroup) {
    std::vector<BlockScale> bs(static_cast<size_t>(w4::kRowGroup * bpc));
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t tile = g0 / w4::kRowGroup * chunks + c;
      uint8_t* ds = dst_scales + tile * sbytes;
      for (int r = 0; r < w4::kRowGroup; ++r) {
        for (int j = 0; j < bpc; ++j) {
          const BlockScale b = bank_scale(f, scales[(g0 + r) * blocks + c * bpc + j]);
          bs[static_cast<size_t>(r * bpc + j)] = b;
          ds[w4::scale_byte_index(fb, r, j)] = b.byte;
        }
      }
      auto code_at = [&](int r, int col) -> uint32_t {  // col within the chunk
        const uint8_t byte = codes[(g0 + r) * (k / 2) + (c * w4::kChunk + col) / 2];
        const BlockScale& b = bs[static_cast<size_t>(r * bpc + col / fb.group)];
        return b.zero ? 0u : static_cast<uint32_t>(((col & 1) ? byte >> 4 : byte & 0xF) ^ b.code_xor);
      };
      uint8_t* dc = dst_codes + tile * w4::kChunkCodeBytes;
      for (int lane = 0; lane < 32; ++lane) {
        for (int s = 0; s < 4; ++s) {
          uint32_t word = 0;
          for (int slot = 0; slot < 4; ++slot) {
            for (int h = 0; h < 2; ++h) {
              word |= w4::place_code(code_at(w4::fragment_row(lane, slot), 16 * s + w4::fragment_col(lane, slot, h)),
                                     slot, h);
            }
          }
          const uint8_t le[4] = {static_cast<uint8_t>(word), static_cast<uint8_t>(word >> 8),
                                 static_cast<uint8_t>(word >> 16), static_cast<uint8_t>(word >> 24)};
          std::memcpy(dc + lane * 16 + s * 4, le, 4);
        }
      }
    }
  }
}

MoeW4Bank moe_w4_alloc(Arena& arena, W4Format f, int64_t experts, int64_t n, int64_t k, int64_t parts,
                       const char* what) {
  if (experts <= 0 || parts <= 0 || n <= 0 || n % (w4::kRowGroup * parts) != 0 || k <= 0 || k % w4::kChunk != 0) {
    throw Error(std::string("moe_w4_alloc ") + what + ": needs N % (16·parts) == 0 and K % 64 == 0, got E " +
                std::to_string(experts) + ", N " + std::to_string(n) + ", K " + std::to_string(k) + ", parts " +
                std::to_string(parts));
  }
  MoeW4Bank b;
  b.format = f, b.experts = experts, b.n = n, b.k = k, b.parts = parts;
  b.codes = static_cast<uint8_t*>(arena.alloc(b.code_bytes(), what));
  b.scales = static_cast<uint8_t*>(arena.alloc(b.scale_bytes(), what));
  b.out_scale = arena.alloc_n<float>(static_cast<size_t>(experts * parts), what);
  return b;
}

void moe_w4_upload_rows(const MoeW4Bank& bank, int64_t row0, const uint8_t* codes, const uint8_t* scales,
                        int64_t rows) {
  if (row0 < 0 || row0 % w4::kRowGroup != 0 || row0 + rows > bank.rows()) {
    throw Error("moe_w4_upload_rows: rows [" + std::to_string(row0) + ", " + std::to_string(row0 + rows) +
                ") outside the bank or not 16-aligned");
  }
  const int64_t g = w4_group(bank.format);
  std::vector<uint8_t> c(static_cast<size_t>(rows * bank.k / 2)), s(static_cast<size_t>(rows * bank.k / g));
  moe_w4_repack(bank.format, codes, scales, rows, bank.k, c.data(), s.data());
  copy_bytes_to_device(bank.codes + row0 * bank.k / 2, c.data(), c.size());
  copy_bytes_to_device(bank.scales + row0 * bank.k / g, s.data(), s.size());
}

void moe_w4_upload_out_scale(const MoeW4Bank& bank, const float* host) {
  copy_bytes_to_device(bank.out_scale, host, static_cast<size_t>(bank.experts * bank.parts) * sizeof(float));
}

// H200, Kimi-K3 shapes (docs/performance.md): the decode-class kernel is fastest through 9 rows per
// expert (T = 512), kM128 at 73 (T = 4096); the switches at 16 and 48 lie between measured points.
MoeTile moe_w4_tile_for(int64_t rows, int64_t experts) {
  const double per_expert = static_cast<double>(rows) / static_cast<double>(experts > 0 ? experts : 1);
  if (per_expert <= 16) return MoeTile::kM16;
  return per_expert <= 48 ? MoeTile::kM64 : MoeTile::kM128;
}

const char* w4_kernel_name(W4Kernel k) {
  switch (k) {
    case W4Kernel::kAuto: return "auto";
    case W4Kernel::kDecode: return "dec";
    case W4Kernel::kDecode3: return "dec3";
    case W4Kernel::kDecode8: return "dec8";
    case W4Kernel::kM16: return "m16";
    case W4Kernel::kM64: return "m64";
    case W4Kernel::kWgmma: return "wg";
  }
  return "?";
}

namespace {

// Opt-in shared memory per block of the current device; sm_90's 227 KB where no device answers (the
// CPU-only tests of the choice).
int64_t max_block_smem() {
  int dev = 0, v = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess || v <= 0) {
    (void)cudaGetLastError();
    return 227 * 1024;
  }
  return v;
}

// The warpgroup-MMA kernel's tensor maps (moe_w4_internal.h): the bank as [row groups, chunks, words].
w4::WgmmaMaps wgmma_maps(const DeviceTensor& xs, const MoeW4Bank& w) {
  const int64_t groups = w.rows() / w4::kRowGroup, chunks = w.k / w4::kChunk;
  const int64_t scale_bytes = w4::scale_bytes_per_chunk(format_bits(w.format));
  const int box_chunks = w4::kWgmmaStageChunks, box_groups = w4::kWgmmaBoxGroups;
  return {tensor_map_bf16_sw128(xs, w4::kWgmmaBoxRows, w4::kChunk, "moe_grouped_gemm_w4 xs"),
          tensor_map_u32_3d(w.codes, {w4::kChunkCodeBytes / 4, chunks, groups},
                            {w4::kChunkCodeBytes, chunks * w4::kChunkCodeBytes},
                            {w4::kChunkCodeBytes / 4, box_chunks, box_groups}, "moe_grouped_gemm_w4 codes"),
          tensor_map_u32_3d(w.scales, {scale_bytes / 4, chunks, groups}, {scale_bytes, chunks * scale_bytes},
                            {static_cast<int>(scale_bytes / 4), box_chunks, box_groups}, "moe_grouped_gemm_w4 scales")};
}

w4::DecodeShape decode_shape(W4Kernel k) {
  return k == W4Kernel::kDecode3 ? w4::kDecode16Shallow : k == W4Kernel::kDecode8 ? w4::kDecode8 : w4::kDecode16;
}
size_t decode_smem(W4Format f, int64_t k, W4Kernel kernel) {
  const w4::DecodeShape s = decode_shape(kernel);
  return w4::decode_smem_bytes(f, k, s.stages, s.xrows);
}
bool decode_fits(W4Format f, int64_t k, W4Kernel kernel, int64_t smem_limit) {
  return k > 0 && k <= INT32_MAX / 2 && static_cast<int64_t>(decode_smem(f, k, kernel)) <= smem_limit;
}
bool is_decode(W4Kernel k) { return k == W4Kernel::kDecode || k == W4Kernel::kDecode3 || k == W4Kernel::kDecode8; }

// The most split-K workspace the automatic choice asks a caller for; past it the decode kernel runs
// whole K where that fits, else the choice falls back to kM16.
constexpr size_t kMaxSplitWorkspace = size_t{32} << 20;

}  // namespace

bool moe_w4_decode_fits(W4Format f, int64_t k, W4Kernel kernel) { return decode_fits(f, k, kernel, max_block_smem()); }

int64_t moe_w4_split_chunks(int64_t k, int splits) {
  const int64_t kc = k / w4::kChunk;
  return splits <= 1 ? kc : (kc + splits - 1) / splits;
}

size_t moe_w4_split_workspace_bytes(int64_t splits, int64_t rows, int64_t n) {
  return static_cast<size_t>(splits * rows * n) * sizeof(float);
}

int moe_w4_decode_splits(W4Format f, int64_t k, int64_t units, int sms, W4Kernel kernel) {
  const int64_t smem = max_block_smem(), kc = k / w4::kChunk;
  const bool whole = decode_fits(f, k, kernel, smem);
  // Whole K wherever it fits: the split form is chosen only where K is past the kernel's shared
  // memory (splitting for SMs that whole-K units leave idle is not yet measured).
  if (kc <= 0 || units <= 0 || sms <= 0 || whole) return whole ? 1 : 0;
  // The busiest SM's work with s splits, in whole-K units: ceil(units·s / sms) / s (the grid gives
  // each CTA a contiguous range of units, at most one more than another).
  auto waves = [&](int64_t s) { return (units * s + sms - 1) / sms; };
  auto runs = [&](int64_t s) {  // s ranges of moe_w4_split_chunks, none empty, and that fit
    const int64_t cps = (kc + s - 1) / s;
    return (kc + cps - 1) / cps == s && decode_fits(f, cps * w4::kChunk, kernel, smem);
  };
  const int64_t cap = std::min<int64_t>(kW4MaxSplits, kc);
  int64_t best = 0;
  for (int64_t s = 1; s <= cap; ++s) {
    if (runs(s) && (best == 0 || waves(s) * best < waves(best) * s)) best = s;
  }
  if (best == 0) return 0;
  for (int64_t s = 1; s <= best; ++s) {  // the fewest splits within 1/16 of the best
    if (runs(s) && 16 * waves(s) * best <= 17 * waves(best) * s) return static_cast<int>(s);
  }
  return static_cast<int>(best);
}

W4Kernel moe_w4_kernel_for(MoeTile tile, W4Format f, int64_t rows, int64_t experts, int64_t k) {
  if (tile == MoeTile::kAuto) tile = moe_w4_tile_for(rows, experts);
  switch (tile) {
    // H200, Kimi-K3 layer (k3_bench_cuda --moe-w4, 2026-12-01): at T = 4096 (73 rows per expert) the
    // warpgroup-MMA kernel runs 227–242 TFLOP/s (the mma.sync m128 tile 182–188); at T = 2048 (37 rows)
    // kM64 137–140, the warpgroup-MMA kernel 123–129.
    case MoeTile::kM64: return W4Kernel::kM64;
    case MoeTile::kM128: return W4Kernel::kWgmma;
    default: break;
  }
  // kDecode8 (8 activation rows, deeper rings) while experts average ≤ 2 rows, so tiles of 9–16 rows
  // (a second pass over their weights) stay rare. H200, Kimi-K3 layer (k3_bench_cuda --moe-w4 --quick,
  // 2026-11-29): NVFP4 3–6 % faster than kDecode at T = 1, 8, 64, MXFP4 within ±2 %; at T = 512 (9 rows
  // per expert) half kDecode's speed.
  const W4Kernel pick = rows <= 2 * experts ? W4Kernel::kDecode8 : W4Kernel::kDecode;
  if (pick == W4Kernel::kDecode8 && moe_w4_decode_fits(f, k, W4Kernel::kDecode8)) return W4Kernel::kDecode8;
  if (moe_w4_decode_fits(f, k, W4Kernel::kDecode)) return W4Kernel::kDecode;
  if (moe_w4_decode_fits(f, k, W4Kernel::kDecode3)) return W4Kernel::kDecode3;
  // K past every decode kernel's shared memory: the split-K form while the most splits fit.
  if (moe_w4_decode_fits(f, moe_w4_split_chunks(k, kW4MaxSplits) * w4::kChunk, pick)) return pick;
  return W4Kernel::kM16;
}

namespace {

// The automatic split count of a decode kernel over (w, d) (moe_w4_decode_splits over the tile map's
// bound), held to kMaxSplitWorkspace: 1 = whole K, 0 = no decode form fits.
int decode_splits_for(const MoeW4Bank& w, const MoeDispatch& d, W4Kernel kernel) {
  const int64_t units = moe_tile_map(d, MoeTile::kM16).bound * ((w.n + 63) / 64);
  const int s = moe_w4_decode_splits(w.format, w.k, units, current_multiprocessors(), kernel);
  if (s > 1 && moe_w4_split_workspace_bytes(s, d.rows(), w.n) > kMaxSplitWorkspace) {
    return moe_w4_decode_fits(w.format, w.k, kernel) ? 1 : 0;
  }
  return s;
}

void run_gemm(const DeviceTensor& xs, const MoeW4Bank& w, const MoeDispatch& d, const DeviceTensor& ys,
              cudaStream_t stream, W4Kernel kernel, bool fall_back, const W4Workspace& ws, int splits);

}  // namespace

size_t moe_w4_workspace_bytes(const MoeW4Bank& w, const MoeDispatch& d) {
  const int64_t R = d.rows();
  const W4Kernel kernel = moe_w4_kernel_for(MoeTile::kAuto, w.format, R, moe_choice_experts(d), w.k);
  if (R == 0 || !is_decode(kernel)) return 0;
  const int s = decode_splits_for(w, d, kernel);
  return s > 1 ? moe_w4_split_workspace_bytes(s, R, w.n) : 0;
}

void moe_grouped_gemm_w4(const DeviceTensor& xs, const MoeW4Bank& w, const MoeDispatch& d, const DeviceTensor& ys,
                         cudaStream_t stream, MoeTile tile) {
  run_gemm(xs, w, d, ys, stream, moe_w4_kernel_for(tile, w.format, d.rows(), moe_choice_experts(d), w.k), true, {}, 0);
}

void moe_grouped_gemm_w4(const DeviceTensor& xs, const MoeW4Bank& w, const MoeDispatch& d, const DeviceTensor& ys,
                         cudaStream_t stream) {
  run_gemm(xs, w, d, ys, stream, W4Kernel::kAuto, true, {}, 0);
}

void moe_grouped_gemm_w4(const DeviceTensor& xs, const MoeW4Bank& w, const MoeDispatch& d, const DeviceTensor& ys,
                         cudaStream_t stream, const W4Workspace& ws) {
  run_gemm(xs, w, d, ys, stream, W4Kernel::kAuto, true, ws, 0);
}

void moe_grouped_gemm_w4(const DeviceTensor& xs, const MoeW4Bank& w, const MoeDispatch& d, const DeviceTensor& ys,
                         cudaStream_t stream, W4Kernel kernel) {
  run_gemm(xs, w, d, ys, stream, kernel, false, {}, 0);
}

void moe_grouped_gemm_w4(const DeviceTensor& xs, const MoeW4Bank& w, const MoeDispatch& d, const DeviceTensor& ys,
                         cudaStream_t stream, W4Kernel kernel, const W4Workspace& ws, int splits) {
  run_gemm(xs, w, d, ys, stream, kernel, false, ws, splits);
}

namespace {

// The operand checks (ys: [R, N]).
void check_operands(const DeviceTensor& xs, const MoeW4Bank& w, const MoeDispatch& d, const DeviceTensor& ys) {
  const std::string fn("moe_grouped_gemm_w4");
  const int64_t R = d.rows(), K = w.k, N = w.n;
  expect_dtype(xs, DType::kBF16, (fn + " xs").c_str());
  expect_shape(xs, R, K, (fn + " xs").c_str());
  expect_shape(ys, R, N, (fn + " ys").c_str());
  if (w.experts != d.experts) {
    throw Error(fn + ": bank has " + std::to_string(w.experts) + " experts, dispatch " + std::to_string(d.experts));
  }
  if (w.codes == nullptr || w.scales == nullptr || w.out_scale == nullptr) throw Error(fn + ": empty bank");
  if (N % (w4::kRowGroup * w.parts) != 0 || K % w4::kChunk != 0 || N > INT32_MAX / 2 || K > INT32_MAX / 2) {
    throw Error(fn + ": needs N % (16·parts) == 0 and K % 64 == 0, got N " + std::to_string(N) + ", K " +
                std::to_string(K));
  }
  for (const DeviceTensor* t : {&xs, &ys}) {
    if (!rows_aligned16(*t)) throw Error(fn + ": needs 16-byte aligned rows, got " + t->describe());
  }
  if (ys.dtype != DType::kF32 && ys.dtype != DType::kBF16) {
    throw Error(fn + ": ys must be f32 or bf16, got " + ys.describe());
  }
}

w4::GemmArgs gemm_args(const DeviceTensor& xs, const MoeW4Bank& w, const MoeDispatch& d, const DeviceTensor& ys) {
  return {xs.data, xs.ld, w.codes, w.scales, w.out_scale, ys.data, ys.ld, static_cast<int>(w.n), static_cast<int>(w.k),
          static_cast<int>(w.n / w.parts), static_cast<int>(w.parts), d.expert_offsets, d.row_weight};
}

// The warpgroup-MMA kernel.
void launch_wgmma(const DeviceTensor& xs, const MoeW4Bank& w, const w4::GemmArgs& a, const MoeTileMap& map, bool f32,
                  cudaStream_t stream) {
  const w4::WgmmaMaps maps = wgmma_maps(xs, w);
  const int sms = current_multiprocessors();
  if (w.format == W4Format::kNvfp4) {
    w4::launch_wgmma<W4Format::kNvfp4>(f32, maps, a, map, sms, stream);
  } else {
    w4::launch_wgmma<W4Format::kMxfp4>(f32, maps, a, map, sms, stream);
  }
}

// The decode kernel's split of K: `splits` > 0 forced, else the automatic count where the workspace
// holds it (else whole K). 0 splits: no form fits.
w4::DecodeSplit decode_split(const MoeW4Bank& w, const MoeDispatch& d, W4Kernel kernel, const W4Workspace& ws,
                             int splits) {
  const int64_t R = d.rows(), K = w.k;
  int s = splits > 0 ? splits : decode_splits_for(w, d, kernel);
  if (splits <= 0 && s > 1 && (ws.data == nullptr || ws.bytes < moe_w4_split_workspace_bytes(s, R, w.n))) {
    s = moe_w4_decode_fits(w.format, K, kernel) ? 1 : 0;
  }
  w4::DecodeSplit sp;
  if (s <= 0) {
    sp.splits = 0;
    return sp;
  }
  const int64_t cps = moe_w4_split_chunks(K, s);
  sp.chunks = static_cast<int>(cps);
  sp.splits = static_cast<int>((K / w4::kChunk + cps - 1) / cps);
  sp.rows = R;
  if (sp.splits > 1) {
    const size_t need = moe_w4_split_workspace_bytes(sp.splits, R, w.n);
    if (ws.data == nullptr || ws.bytes < need || reinterpret_cast<uintptr_t>(ws.data) % 16 != 0) {
      throw Error("moe_grouped_gemm_w4: " + std::to_string(sp.splits) +
                  " K splits need a 16-byte aligned workspace of " + std::to_string(need) + " bytes, got " +
                  std::to_string(ws.bytes));
    }
    sp.part = ws.data;
  }
  return sp;
}

void run_gemm(const DeviceTensor& xs, const MoeW4Bank& w, const MoeDispatch& d, const DeviceTensor& ys,
              cudaStream_t stream, W4Kernel kernel, bool fall_back, const W4Workspace& ws, int splits) {
  check_operands(xs, w, d, ys);
  const int64_t R = d.rows(), K = w.k;
  if (kernel == W4Kernel::kAuto) {
    kernel = moe_w4_kernel_for(MoeTile::kAuto, w.format, R, moe_choice_experts(d), K);
    fall_back = true;
  }
  bool decode = is_decode(kernel);
  w4::DecodeSplit sp;
  if (decode) {
    sp = decode_split(w, d, kernel, ws, splits);
    if (sp.splits == 0 && fall_back) {  // K fits no decode form this call can run
      kernel = W4Kernel::kM16;
      decode = false;
    } else {
      const int64_t k_smem = sp.splits == 0 ? K : static_cast<int64_t>(sp.chunks) * w4::kChunk;
      if (!moe_w4_decode_fits(w.format, k_smem, kernel)) {
        throw Error(std::string("moe_grouped_gemm_w4: the ") + w4_kernel_name(kernel) + " kernel needs " +
                    std::to_string(decode_smem(w.format, k_smem, kernel)) + " bytes of shared memory for K " +
                    std::to_string(k_smem) + (k_smem != K ? " of " + std::to_string(K) : std::string()) +
                    ", more than the device's " + std::to_string(max_block_smem()));
      }
    }
  }
  const MoeTile tile = kernel == W4Kernel::kM64     ? MoeTile::kM64
                       : kernel == W4Kernel::kWgmma ? MoeTile::kM128
                                                    : MoeTile::kM16;
  const MoeTileMap map = moe_tile_map(d, tile);
  if (R == 0) return;
  const w4::GemmArgs a = gemm_args(xs, w, d, ys);
  const bool f32 = ys.dtype == DType::kF32;
  if (decode) {
    if (w.format == W4Format::kNvfp4) {
      w4::launch_decode<W4Format::kNvfp4>(decode_shape(kernel), f32, a, sp, map, stream);
    } else {
      w4::launch_decode<W4Format::kMxfp4>(decode_shape(kernel), f32, a, sp, map, stream);
    }
    if (sp.splits > 1) w4::launch_split_sum(f32, a, sp, static_cast<int>(d.experts), stream);
  } else if (kernel == W4Kernel::kWgmma) {
    launch_wgmma(xs, w, a, map, f32, stream);
  } else if (w.format == W4Format::kNvfp4) {
    w4::launch_gemm<W4Format::kNvfp4>(tile, f32, a, map, stream);
  } else {
    w4::launch_gemm<W4Format::kMxfp4>(tile, f32, a, map, stream);
  }
}

}  // namespace
}  // namespace k3::cuda
