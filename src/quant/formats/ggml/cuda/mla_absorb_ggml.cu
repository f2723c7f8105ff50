// The absorb / un-absorb products of MLA decode (mla.h) over a split GGUF kv_b kept in its GGML
// blocks (k3-quant-formats §5.5: k_b [H, 512, 128] Q4_0, v_b [H, 128, 512] Q2_K):
//   mla_absorb_q_ggml:   q_abs[b][h] = [Σ_d k_b[h][c][d] · q_nope[b][h][d] (c < 512) | q_pe[b][h]]
//   mla_unabsorb_o_ggml: out[b][h·128 + j] = Σ_c v_b[h][j][c] · o_lat[b][h][c] · sigmoid(gate)
// Both are one "per-head GEMV": bank row h·N + n is contracted with head h's K activations of every
// sequence. Contract (the CPU's, which dequantises the split kv_b to float): every weight is the
// block trait's value() — bit-identical to ggml's dequantisation — times the f32 (or bf16) activation,
// fp32 accumulation; no activation quantisation. A warp owns one weight row: each lane dequantises its
// K/32 elements once into registers and reuses them for every sequence (one warp sum per sequence),
// so each packed byte is read once per call.
#include <string>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/kernel_util.cuh"
#include "backend/cuda/attention/mla/mla.h"
#include "quant/formats/ggml/cuda/mla_absorb_ggml.h"
#include "backend/cuda/attention/mla/mla_util.cuh"
#include "quant/formats/ggml/cuda/moe_ggml_blocks.h"

namespace k3::cuda {
namespace {

using namespace mla_detail;
constexpr int kRowsPerCta = 8;  // one weight row per warp
constexpr int kThreads = 32 * kRowsPerCta;
constexpr int kMaxPerLane = kMlaRank / 32;  // K ≤ 512: 16 weights per lane

// absorb: q_abs[b][h·576 + n] = bf16(acc); the CTAs of row block 0 also copy q_pe behind the latent.
template <typename Tq>
struct AbsorbOut {
  const Tq* q;
  int64_t ldq;
  bf16* out;
  int64_t ldo;
  __device__ void operator()(int b, int h, int n, float acc) const {
    out[static_cast<int64_t>(b) * ldo + static_cast<int64_t>(h) * kMlaRow + n] = __float2bfloat16_rn(acc);
  }
  __device__ void tail(int h, int batch) const {
    for (int o = threadIdx.x; o < batch * kMlaRope; o += kThreads) {
      const int64_t b = o / kMlaRope;
      const int e = o % kMlaRope;
      out[b * ldo + static_cast<int64_t>(h) * kMlaRow + kMlaRank + e] =
          __float2bfloat16_rn(load_val(q + b * ldq + static_cast<int64_t>(h) * kMlaQk + kMlaNope + e));
    }
  }
};

// un-absorb: out[b][h·128 + n] = acc · sigmoid(gate[b][h·128 + n]) (kGate) or acc.
template <typename Tg, typename Tout, bool kGate>
struct UnabsorbOut {
  const Tg* gate;
  int64_t ldg;
  Tout* out;
  int64_t ldo;
  __device__ void operator()(int b, int h, int n, float acc) const {
    const int64_t col = static_cast<int64_t>(h) * kMlaV + n;
    if constexpr (kGate) acc *= 1.0f / (1.0f + expf(-load_val(gate + static_cast<int64_t>(b) * ldg + col)));
    store_val(out + static_cast<int64_t>(b) * ldo + col, acc);
  }
  __device__ void tail(int, int) const {}
};

// y[b][h][n] = Σ_k W[h·N + n][k] · x[b·ldx + h·x_head + k], handed to `out`. grid (H, N / 8).
template <class F, typename Tx, class Out>
__global__ void __launch_bounds__(kThreads) head_gemv_kernel(const uint8_t* __restrict__ w, int64_t row_bytes, int n_rows,
                                                             int k, const Tx* __restrict__ x, int64_t ldx, int64_t x_head,
                                                             int batch, Out out) {
  const int h = blockIdx.x, lane = threadIdx.x & 31, n = blockIdx.y * kRowsPerCta + (threadIdx.x >> 5);
  if (blockIdx.y == 0) out.tail(h, batch);
  if (n >= n_rows) return;
  const uint8_t* row = w + (static_cast<int64_t>(h) * n_rows + n) * row_bytes;
  const int per_lane = k / 32;
  float wv[kMaxPerLane];
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    const int i = lane + 32 * j;
    wv[j] = j < per_lane ? F::value(row + static_cast<int64_t>(i / F::kBlock) * F::kBytes, i % F::kBlock) : 0.0f;
  }
  for (int b = 0; b < batch; ++b) {
    const Tx* xb = x + static_cast<int64_t>(b) * ldx + static_cast<int64_t>(h) * x_head + lane;
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j) {
      if (j < per_lane) acc = fmaf(wv[j], load_val(xb + 32 * j), acc);
    }
    acc = detail::warp_sum(acc);
    if (lane == 0) out(b, h, n, acc);
  }
}

template <typename Tx, class Out>
void launch_head_gemv(const MoeGgmlBank& w, const Tx* x, int64_t ldx, int64_t x_head, int64_t batch, Out out,
                      cudaStream_t stream, const char* what) {
  const dim3 grid(static_cast<unsigned>(w.experts), static_cast<unsigned>((w.n + kRowsPerCta - 1) / kRowsPerCta));
  const bool known = ggml_blocks::visit(w.type, [&](auto trait) {
    using F = decltype(trait);
    head_gemv_kernel<F, Tx, Out><<<grid, kThreads, 0, stream>>>(w.data, w.row_bytes(), static_cast<int>(w.n),
                                                                static_cast<int>(w.k), x, ldx, x_head,
                                                                static_cast<int>(batch), out);
  });
  if (!known) throw Error(std::string(what) + ": unsupported GGML type");
  K3_CUDA_CHECK_LAUNCH("head_gemv_kernel");
}

void check_split_bank(const MoeGgmlBank& w, int64_t heads, int64_t n, int64_t k, const char* what) {
  if (w.data == nullptr || w.experts != heads || w.n != n || w.k != k) {
    throw Error(std::string(what) + ": expects [" + std::to_string(heads) + ", " + std::to_string(n) + ", " +
                std::to_string(k) + "] GGML blocks, got [" + std::to_string(w.experts) + ", " + std::to_string(w.n) + ", " +
                std::to_string(w.k) + "]");
  }
  moe_ggml_check_shape(w.type, w.experts, w.n, w.k, what);
}

}  // namespace

void mla_absorb_q_ggml(const DeviceTensor& q, const MoeGgmlBank& k_b, const DeviceTensor& q_abs, cudaStream_t stream) {
  const int64_t H = q.cols / kMlaQk, B = q.rows;
  if (q.cols % kMlaQk != 0 || H == 0) throw Error("mla_absorb_q_ggml: q must be [B, H·192], got " + q.describe());
  check_split_bank(k_b, H, kMlaRank, kMlaNope, "mla_absorb_q_ggml k_b");
  expect_dtype(q_abs, DType::kBF16, "mla_absorb_q_ggml q_abs");
  expect_shape(q_abs, B, H * kMlaRow, "mla_absorb_q_ggml q_abs");
  if (B == 0) return;
  if (q.dtype == DType::kBF16) {
    launch_head_gemv(k_b, q.as<const bf16>(), q.ld, kMlaQk, B, AbsorbOut<bf16>{q.as<const bf16>(), q.ld, q_abs.as<bf16>(), q_abs.ld},
                     stream, "mla_absorb_q_ggml");
  } else if (q.dtype == DType::kF32) {
    launch_head_gemv(k_b, q.as<const float>(), q.ld, kMlaQk, B,
                     AbsorbOut<float>{q.as<const float>(), q.ld, q_abs.as<bf16>(), q_abs.ld}, stream, "mla_absorb_q_ggml");
  } else {
    throw Error("mla_absorb_q_ggml: f32 or bf16 q, got " + q.describe());
  }
}

void mla_unabsorb_o_ggml(const DeviceTensor& o_lat, const MoeGgmlBank& v_b, const DeviceTensor& gate,
                         const DeviceTensor& out, cudaStream_t stream) {
  const int64_t H = o_lat.cols / kMlaRank, B = o_lat.rows;
  if (o_lat.cols % kMlaRank != 0 || H == 0) throw Error("mla_unabsorb_o_ggml: o_lat must be [B, H·512], got " + o_lat.describe());
  expect_dtype(o_lat, DType::kF32, "mla_unabsorb_o_ggml o_lat");
  check_split_bank(v_b, H, kMlaV, kMlaRank, "mla_unabsorb_o_ggml v_b");
  expect_shape(out, B, H * kMlaV, "mla_unabsorb_o_ggml out");
  const bool has_gate = gate.data != nullptr;
  if (has_gate) expect_shape(gate, B, H * kMlaV, "mla_unabsorb_o_ggml gate");
  if (has_gate && gate.dtype != DType::kBF16 && gate.dtype != DType::kF32) {
    throw Error("mla_unabsorb_o_ggml: f32 or bf16 gate, got " + gate.describe());
  }
  if (out.dtype != DType::kBF16 && out.dtype != DType::kF32) throw Error("mla_unabsorb_o_ggml: f32 or bf16 out, got " + out.describe());
  if (B == 0) return;
  const float* x = o_lat.as<const float>();
  auto run = [&](auto tag_out, auto tag_gate, auto gated) {
    using To = decltype(tag_out);
    using Tg = decltype(tag_gate);
    const UnabsorbOut<Tg, To, decltype(gated)::value> o{static_cast<const Tg*>(gate.data), gate.ld, out.as<To>(), out.ld};
    launch_head_gemv(v_b, x, o_lat.ld, kMlaRank, B, o, stream, "mla_unabsorb_o_ggml");
  };
  const bool ob = out.dtype == DType::kBF16;
  if (!has_gate) {
    ob ? run(bf16{}, float{}, std::false_type{}) : run(float{}, float{}, std::false_type{});
  } else if (gate.dtype == DType::kBF16) {
    ob ? run(bf16{}, bf16{}, std::true_type{}) : run(float{}, bf16{}, std::true_type{});
  } else {
    ob ? run(bf16{}, float{}, std::true_type{}) : run(float{}, float{}, std::true_type{});
  }
}

}  // namespace k3::cuda
