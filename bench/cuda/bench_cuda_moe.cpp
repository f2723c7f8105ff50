// The MoE sections of k3_bench_cuda: bf16 expert banks, and the quantized-expert harness with its
// 4-bit, ModelSlim W4A8 and GGUF sections (the tables are described at the top of bench_cuda.cpp).
#include "bench_cuda_moe.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/upload.h"
#include "backend/cuda/gemm/gemm.h"
#include "backend/cuda/moe/moe.h"
#include "backend/cuda/moe/moe_tiles.h"
#include "backend/cuda/moe/moe_w4.h"
#include "backend/cuda/moe/moe_w4_tuning.h"
#include "backend/cuda/ops/ops.h"
#include "quant/formats/fp8/cuda/moe_fp8_block.h"
#include "quant/formats/ggml/cuda/moe_ggml.h"
#include "quant/formats/ggml/cuda/moe_ggml_tuning.h"
#include "quant/formats/modelslim/cuda/moe_w4a8.h"
#include "quant/formats/modelslim/cuda/moe_w4a8_tuning.h"
#include "quant/formats/nvfp4/cuda/moe_nvfp4_act.h"

namespace k3::cuda::bench {

// ---- MoE ------------------------------------------------------------------------------------------

namespace {

struct MoeShape {
  const char* name;
  int64_t experts, top_k, hidden, inter;
  std::vector<int64_t> tokens;
};

const char* tile_name(MoeTile t) {
  switch (t) {
    case MoeTile::kM16: return "m16";
    case MoeTile::kM64: return "m64";
    case MoeTile::kM128: return "m128";
    case MoeTile::kAuto: break;
  }
  return "auto";
}

void print_moe_row(const char* model, int64_t T, int64_t R, double hit, const char* what, const std::string& tile,
                   double ms, double wbytes, double flop) {
  const double tbs = wbytes / (ms * 1e-3) / 1e12, tf = flop / (ms * 1e-3) / 1e12;
  if (wbytes > 0) {
    std::printf("%-12s %5lld %6lld %6.1f | %-9s %-10s | %9.1f %8.3f %7.2f %5.0f%% %7.1f %5.1f%%\n", model,
                static_cast<long long>(T), static_cast<long long>(R), hit, what, tile.c_str(), ms * 1e3, wbytes / 1e9,
                tbs, 100.0 * tbs / kReadCeilingTBs, tf, 100.0 * tf / kBf16CeilingTF);
  } else {
    std::printf("%-12s %5lld %6lld %6.1f | %-9s %-10s | %9.1f\n", model, static_cast<long long>(T),
                static_cast<long long>(R), hit, what, tile.c_str(), ms * 1e3);
  }
}

constexpr int kRoutings = 8;

// kRoutings random routings of T tokens (k distinct experts per token), dispatched; hit = the mean
// number of distinct experts they touch.
struct Routings {
  std::vector<MoeDispatch> d;
  std::vector<DeviceTensor> ids;
  double hit = 0;
};

Routings make_routings(Arena& arena, Stream& stream, std::mt19937_64& gen, int64_t T, int64_t k, int64_t E) {
  Routings rt;
  std::vector<int32_t> pool(static_cast<size_t>(E));
  std::iota(pool.begin(), pool.end(), 0);
  for (int r = 0; r < kRoutings; ++r) {
    std::vector<int32_t> h(static_cast<size_t>(T * k));
    std::vector<char> seen(static_cast<size_t>(E), 0);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t j = 0; j < k; ++j) {
        std::swap(pool[j], pool[std::uniform_int_distribution<int64_t>(j, E - 1)(gen)]);
        h[t * k + j] = pool[j];
        seen[pool[j]] = 1;
      }
    }
    rt.hit += static_cast<double>(std::count(seen.begin(), seen.end(), 1)) / kRoutings;
    rt.ids.push_back(arena.alloc_tensor(DType::kI32, T, k, "moe ids"));
    copy_bytes_to_device(rt.ids.back().data, h.data(), h.size() * sizeof(int32_t));
    rt.d.push_back(moe_dispatch_view(arena.alloc(moe_dispatch_bytes(T, k, E), "moe dispatch"), T, k, E));
    moe_dispatch(rt.ids.back(), rt.d.back(), stream);
  }
  return rt;
}

}  // namespace

void bench_moe(Arena& arena, Stream& stream, const RandomPool& bf16_pool, bool all_tiles) {
  std::printf("\n== MoE, bf16 expert banks, random routing (k distinct experts per token; %d routings rotated over"
              " the timed calls); GEMM1 [w1|w3] N = 2·inter, K = hidden, bf16 out; GEMM2 w2 N = hidden, K = inter;"
              " W GB = weight bytes of the experts hit (mean over the routings); TF/s over real rows ==\n",
              kRoutings);
  std::printf("%-12s %5s %6s %6s | %-9s %-10s | %9s %8s %7s %6s %7s %6s\n", "model", "T", "rows", "hit", "kernel",
              "tile", "us", "W GB", "TB/s", "%3.83", "TF/s", "%797");
  // "dense": 8 experts of 1024 rows each on average, the compute-bound reference for the tiles.
  const std::vector<int64_t> tokens = {1, 8, 64, 512, 4096};
  const std::vector<MoeShape> shapes = {{"kimi-linear", 256, 8, 2304, 1024, tokens},
                                        {"kimi-k3", 896, 16, 3584, 3072, tokens},
                                        {"dense", 8, 1, 4096, 2048, {8192}}};
  for (const MoeShape& s : shapes) {
    const size_t mark = arena.mark();
    const int64_t E = s.experts, k = s.top_k, H = s.hidden, I = s.inter;
    const int64_t t_max = s.tokens.back(), r_max = t_max * k;
    const double need = 2.0 * (E * 3 * I * H + r_max * (2 * H + 3 * I) + t_max * H);
    if (need > static_cast<double>(arena.capacity() - arena.used()) * 0.98) {
      std::printf("%-12s skipped: needs %.1f GB of arena, %.1f GB free (--arena)\n", s.name, need / 1e9,
                  static_cast<double>(arena.capacity() - arena.used()) / 1e9);
      continue;
    }
    const DeviceTensor w1 = arena.alloc_tensor(DType::kBF16, E * 2 * I, H, "moe w1|w3");
    const DeviceTensor w2 = arena.alloc_tensor(DType::kBF16, E * H, I, "moe w2");
    bf16_pool.fill(w1.data, w1.bytes(), 41);
    bf16_pool.fill(w2.data, w2.bytes(), 42);
    const DeviceTensor x = arena.alloc_tensor(DType::kBF16, t_max, H, "moe x");
    bf16_pool.fill(x.data, x.bytes(), 43);
    const DeviceTensor xs_all = arena.alloc_tensor(DType::kBF16, r_max, H, "moe xs");
    const DeviceTensor gu_all = arena.alloc_tensor(DType::kBF16, r_max, 2 * I, "moe gate|up");
    const DeviceTensor hs_all = arena.alloc_tensor(DType::kBF16, r_max, I, "moe act");
    const DeviceTensor ys_all = arena.alloc_tensor(DType::kBF16, r_max, H, "moe ys");
    const DeviceTensor out_all = arena.alloc_tensor(DType::kBF16, t_max, H, "moe out");
    bf16_pool.fill(hs_all.data, hs_all.bytes(), 44);
    std::mt19937_64 gen(2024);
    for (int64_t T : s.tokens) {
      const size_t tmark = arena.mark();
      const int64_t R = T * k;
      const Routings rt = make_routings(arena, stream, gen, T, k, E);
      const std::vector<MoeDispatch>& d = rt.d;
      const std::vector<DeviceTensor>& ids = rt.ids;
      const double hit = rt.hit;
      std::vector<float> wv(static_cast<size_t>(R), 1.0f / static_cast<float>(k));
      const DeviceTensor weights = upload_f32(arena, wv.data(), T, k, DType::kF32, "moe weights");
      const DeviceTensor xs = xs_all.row_slice(0, R), gu = gu_all.row_slice(0, R), hs = hs_all.row_slice(0, R);
      const DeviceTensor ys = ys_all.row_slice(0, R), out = out_all.row_slice(0, T), xt = x.row_slice(0, T);
      moe_gather(xt, d[0], xs, stream);
      const double w1_bytes = hit * 2.0 * I * H * 2, w2_bytes = hit * H * I * 2.0;
      const double f1 = 2.0 * R * 2 * I * H, f2 = 2.0 * R * H * I;
      double ms = time_ms(stream, [&](int i) { moe_dispatch(ids[i % kRoutings], d[i % kRoutings], stream); });
      print_moe_row(s.name, T, R, hit, "dispatch", "", ms, 0, 0);
      std::vector<MoeTile> tiles = {MoeTile::kAuto};
      if (all_tiles) tiles.insert(tiles.end(), {MoeTile::kM16, MoeTile::kM64, MoeTile::kM128});
      const std::string chosen = tile_name(moe_tile_for(R, E));
      for (MoeTile tile : tiles) {
        const std::string tname = tile == MoeTile::kAuto ? "auto=" + chosen : tile_name(tile);
        ms = time_ms(stream, [&](int i) { moe_grouped_gemm_bf16(xs, w1, d[i % kRoutings], gu, stream, tile); });
        print_moe_row(s.name, T, R, hit, "gemm1", tname, ms, w1_bytes, f1);
        ms = time_ms(stream, [&](int i) { moe_grouped_gemm_bf16(hs, w2, d[i % kRoutings], ys, stream, tile); });
        print_moe_row(s.name, T, R, hit, "gemm2", tname, ms, w2_bytes, f2);
      }
      const GatedActivation silu{};
      ms = time_ms(stream, [&](int i) {
        const MoeDispatch& di = d[i % kRoutings];
        moe_dispatch(ids[i % kRoutings], di, stream);
        moe_gather(xt, di, xs, stream);
        moe_grouped_gemm_bf16(xs, w1, di, gu, stream);
        gated_activation(silu, gu.col_slice(0, I), gu.col_slice(I, I), hs, stream);
        moe_grouped_gemm_bf16(hs, w2, di, ys, stream);
        moe_combine(ys, di, weights, out, false, stream);
      });
      print_moe_row(s.name, T, R, hit, "layer", "auto=" + chosen, ms, w1_bytes + w2_bytes, f1 + f2);
      std::fflush(stdout);
      K3_CUDA_CHECK(cudaStreamSynchronize(stream));
      arena.reset(tmark);
    }
    K3_CUDA_CHECK(cudaDeviceSynchronize());
    arena.reset(mark);
  }
}

// ---- MoE, quantized experts: one harness --------------------------------------------------------------

namespace {

// The Kimi-K3 routed layer the quantized-expert sections measure (896 experts, top-16, GEMM1 [w1|w3]
// 3584 -> 2x3072, GEMM2 3072 -> 3584, bf16 out), with its bf16 activation buffers and, arena
// permitting, bf16 banks whose grouped GEMM every row is compared with (x bf16).
struct MoeLayer {
  static constexpr int64_t E = 896, k = 16, H = 3584, I = 3072;
  std::vector<int64_t> tokens;
  DeviceTensor x, xs, gu, hs, ys, bf1, bf2;  // x [T_max, H]; the others over R_max = T_max·k sorted rows
  bool with_bf16 = false;

  int64_t t_max() const { return tokens.back(); }
  int64_t r_max() const { return tokens.back() * k; }
  double bf16_bytes() const { return 2.0 * E * 3 * I * H; }
  double activation_bytes() const { return 2.0 * (r_max() * (2 * H + 3 * I) + t_max() * H); }
};

void print_moe_layer_header(const char* what, const char* bytes) {
  std::printf("\n== MoE, %s, Kimi-K3 layer: %lld experts, top-%lld, GEMM1 [w1|w3] %lld -> 2x%lld, GEMM2 %lld -> %lld,"
              " bf16 out; random routing (%d rotated); GB = %s of the experts hit; TF/s counts the real rows"
              " (TOPS for integer kernels); x bf16 = speed-up over the bf16 grouped GEMM ==\n",
              what, static_cast<long long>(MoeLayer::E), static_cast<long long>(MoeLayer::k),
              static_cast<long long>(MoeLayer::H), static_cast<long long>(MoeLayer::I),
              static_cast<long long>(MoeLayer::I), static_cast<long long>(MoeLayer::H), kRoutings, bytes);
}

// Whether `bank_bytes` (+ `extra` scratch) fit the arena next to the activations (else prints why, when
// `report`); the bf16 reference banks are added when they fit too and `want_bf16`.
bool moe_layer_fits(const Arena& arena, MoeLayer& l, double bank_bytes, double extra, bool want_bf16,
                    bool report = true) {
  const double free_b = static_cast<double>(arena.capacity() - arena.used()) * 0.98;
  const double need = bank_bytes + extra + l.activation_bytes();
  if (need > free_b) {
    if (report) std::printf("skipped: needs %.1f GB of arena, %.1f GB free (--arena)\n", need / 1e9, free_b / 0.98 / 1e9);
    return false;
  }
  l.with_bf16 = want_bf16 && need + l.bf16_bytes() <= free_b;
  if (want_bf16 && !l.with_bf16) std::printf("(bf16 banks left out: not enough arena; --arena)\n");
  return true;
}

void alloc_moe_layer(Arena& arena, const RandomPool& bf16_pool, MoeLayer& l) {
  const int64_t E = MoeLayer::E, H = MoeLayer::H, I = MoeLayer::I;
  if (l.with_bf16) {
    l.bf1 = arena.alloc_tensor(DType::kBF16, E * 2 * I, H, "moe bf16 w1|w3");
    l.bf2 = arena.alloc_tensor(DType::kBF16, E * H, I, "moe bf16 w2");
    bf16_pool.fill(l.bf1.data, l.bf1.bytes(), 41);
    bf16_pool.fill(l.bf2.data, l.bf2.bytes(), 42);
  }
  l.x = arena.alloc_tensor(DType::kBF16, l.t_max(), H, "moe x");
  l.xs = arena.alloc_tensor(DType::kBF16, l.r_max(), H, "moe xs");
  l.gu = arena.alloc_tensor(DType::kBF16, l.r_max(), 2 * I, "moe gate|up");
  l.hs = arena.alloc_tensor(DType::kBF16, l.r_max(), I, "moe act");
  l.ys = arena.alloc_tensor(DType::kBF16, l.r_max(), H, "moe ys");
  bf16_pool.fill(l.x.data, l.x.bytes(), 43);
  bf16_pool.fill(l.hs.data, l.hs.bytes(), 44);
  bf16_pool.fill(l.gu.data, l.gu.bytes(), 40);
}

// Kimi-K3's activation (its values do not change the work).
GatedActivation k3_situ() {
  GatedActivation situ;
  situ.situ = true, situ.beta = 10.0f;
  return situ;
}

// One GEMM of one token count: its sorted rows, input (GEMM2: the bf16 activation) and output.
struct MoeGemm {
  int64_t T, R;
  const Routings& rt;
  int gemm;  // 1 or 2
  const DeviceTensor& in;
  const DeviceTensor& out;
  int64_t N, K;
};

// A timed variant: bytes 0 = no bandwidth or throughput figure (an activation quantisation, say).
struct MoeVariant {
  std::string label;
  double bytes;
  std::function<void(int)> fn;  // call i uses routing i % kRoutings
};

// GEMM 2's input from GEMM 1's output gu as the model forms it — the activation applied by the
// quantisation kernel, one pass ("<label> act+quant") — and as two kernels, gated_activation into the
// bf16 rows hs, then the quantisation ("<label> act, quant"); no bandwidth figure.
void push_gemm2_input_variants(std::vector<MoeVariant>& vs, const std::string& label, const DeviceTensor& gu,
                               const DeviceTensor& hs, const std::function<void(const GatedActivation&)>& fused,
                               const std::function<void(const DeviceTensor&)>& quantize, cudaStream_t stream) {
  const int64_t I = hs.cols;
  vs.push_back({label + " act+quant", 0.0, [=](int) { fused(k3_situ()); }});
  vs.push_back({label + " act, quant", 0.0, [=](int) {
                  gated_activation(k3_situ(), gu.col_slice(0, I), gu.col_slice(I, I), hs, stream);
                  quantize(hs);
                }});
}

// For every T: kRoutings routings, the gather, `per_tokens` (the sections' own per-T preparation, in
// arena memory given back after the T), then per GEMM the bf16 reference (when present) and
// `variants`, timed in interleaved rounds, one row each.
void run_moe_layer(Arena& arena, Stream& stream, const MoeLayer& l,
                   const std::function<void(int64_t T, int64_t R, const Routings& rt)>& per_tokens,
                   const std::function<std::vector<MoeVariant>(const MoeGemm& g)>& variants) {
  const int64_t E = MoeLayer::E, k = MoeLayer::k, H = MoeLayer::H, I = MoeLayer::I;
  std::printf("%5s %6s %6s | %-5s %-18s | %9s %7s %7s %6s %7s %7s\n", "T", "rows", "hit", "gemm", "kernel", "us", "GB",
              "TB/s", "%3.83", "TF/s", "x bf16");
  std::mt19937_64 gen(2024);
  for (int64_t T : l.tokens) {
    const size_t tmark = arena.mark();
    const int64_t R = T * k;
    const Routings rt = make_routings(arena, stream, gen, T, k, E);
    const DeviceTensor xs = l.xs.row_slice(0, R), gu = l.gu.row_slice(0, R), hs = l.hs.row_slice(0, R);
    const DeviceTensor ys = l.ys.row_slice(0, R);
    moe_gather(l.x.row_slice(0, T), rt.d[0], xs, stream);
    per_tokens(T, R, rt);
    for (int gemm = 1; gemm <= 2; ++gemm) {
      const MoeGemm g{T, R, rt, gemm, gemm == 1 ? xs : hs, gemm == 1 ? gu : ys, gemm == 1 ? 2 * I : H, gemm == 1 ? H : I};
      std::vector<MoeVariant> vs;
      if (l.with_bf16) {
        const DeviceTensor w = gemm == 1 ? l.bf1 : l.bf2;
        vs.push_back({"bf16 auto=" + std::string(tile_name(moe_tile_for(R, E))), rt.hit * g.N * g.K * 2.0,
                      [&, w](int i) { moe_grouped_gemm_bf16(g.in, w, rt.d[i % kRoutings], g.out, stream); }});
      }
      for (MoeVariant& v : variants(g)) vs.push_back(std::move(v));
      std::vector<std::pair<const char*, std::function<void(int)>>> fns;
      for (const MoeVariant& v : vs) fns.emplace_back(v.label.c_str(), v.fn);
      const std::vector<double> ms = time_interleaved(stream, fns);
      const double flop = 2.0 * R * g.N * g.K;
      for (size_t f = 0; f < vs.size(); ++f) {
        const double sec = ms[f] * 1e-3, tbs = vs[f].bytes / sec / 1e12;
        const bool gemm_row = vs[f].bytes > 0;
        std::printf("%5lld %6lld %6.1f | gemm%d %-18s | %9.1f %7.3f %7.2f %5.0f%% %7.1f %7.2f\n",
                    static_cast<long long>(T), static_cast<long long>(R), rt.hit, gemm, vs[f].label.c_str(),
                    ms[f] * 1e3, vs[f].bytes / 1e9, gemm_row ? tbs : std::nan(""),
                    gemm_row ? 100.0 * tbs / kReadCeilingTBs : std::nan(""),
                    gemm_row ? flop / sec / 1e12 : std::nan(""),
                    l.with_bf16 && gemm_row ? ms[0] / ms[f] : std::nan(""));
      }
      std::fflush(stdout);
    }
    K3_CUDA_CHECK(cudaStreamSynchronize(stream));
    arena.reset(tmark);
  }
}

// "auto=<chosen>" for kAuto, else the tile's name.
std::string tile_label(MoeTile tile, MoeTile chosen) {
  return tile == MoeTile::kAuto ? "auto=" + std::string(tile_name(chosen)) : std::string(tile_name(tile));
}

constexpr MoeTile kW4a8Tiles[] = {MoeTile::kAuto, MoeTile::kM16, MoeTile::kM64};

}  // namespace

// ---- MoE, 4-bit experts ----------------------------------------------------------------------------

namespace {

// A dense linear as a bank of one expert (executor/bank_linear.cpp), N = 4096, K = 7168: the automatic
// kernel with the workspace moe_w4_workspace_bytes asks for (the split-K decode kernel), the tile
// kernel kM16 (the choice without one), and the bf16 small-M GEMM over bf16 weights of the shape.
void bench_w4_dense(Arena& arena, Stream& stream, const RandomPool& bf16_pool) {
  const int64_t N = 4096, K = 7168;
  const size_t mark = arena.mark();
  std::printf("\n4-bit dense linear as one expert, N %lld K %lld (us; f32 output)\n", static_cast<long long>(N),
              static_cast<long long>(K));
  const DeviceTensor wb = arena.alloc_tensor(DType::kBF16, N, K, "dense bf16 weight");
  bf16_pool.fill(wb.data, static_cast<size_t>(N * K * 2), 71);
  for (W4Format f : {W4Format::kNvfp4, W4Format::kMxfp4}) {
    const MoeW4Bank w = moe_w4_alloc(arena, f, 1, N, K, 1, "dense w4");
    bf16_pool.fill(w.codes, w.code_bytes(), 72);
    K3_CUDA_CHECK(cudaMemset(w.scales, f == W4Format::kNvfp4 ? 9 << 3 : 127, w.scale_bytes()));
    const float one = 1.0f;
    moe_w4_upload_out_scale(w, &one);
    for (int64_t T : {1, 8}) {
      const DeviceTensor x = arena.alloc_tensor(DType::kBF16, T, K, "dense x");
      bf16_pool.fill(x.data, static_cast<size_t>(T * K * 2), 73);
      const DeviceTensor y = arena.alloc_tensor(DType::kF32, T, N, "dense y");
      const MoeDispatch d = moe_dispatch_view(arena.alloc(moe_dispatch_bytes(T, 1, 1), "dense dispatch"), T, 1, 1);
      moe_one_expert_dispatch(d, stream);
      const size_t bytes = moe_w4_workspace_bytes(w, d);
      const W4Workspace ws{bytes > 0 ? static_cast<float*>(arena.alloc(bytes, "dense workspace")) : nullptr, bytes};
      const std::string chosen = w4_kernel_name(moe_w4_kernel_for(MoeTile::kAuto, f, T, 1, K));
      const std::vector<double> ms = time_interleaved(
          stream, {{"split", [&](int) { moe_grouped_gemm_w4(x, w, d, y, stream, ws); }},
                   {"m16", [&](int) { moe_grouped_gemm_w4(x, w, d, y, stream, W4Kernel::kM16); }},
                   {"bf16", [&](int) { gemv_bf16(x, wb, y, stream); }}});
      std::printf("%-6s T %2lld | auto=%s, %zu KB workspace %8.1f | m16 %8.1f | bf16 gemv %8.1f\n", w4_format_name(f),
                  static_cast<long long>(T), chosen.c_str(), bytes >> 10, ms[0] * 1e3, ms[1] * 1e3, ms[2] * 1e3);
    }
  }
  arena.reset(mark);
}

}  // namespace

void bench_moe_w4(Arena& arena, Stream& stream, const RandomPool& bf16_pool, bool quick) {
  const int64_t E = MoeLayer::E, H = MoeLayer::H, I = MoeLayer::I;
  print_moe_layer_header("4-bit experts (W4A16)", "packed codes + block scales (bf16 weights for bf16)");
  MoeLayer l;
  l.tokens = quick ? std::vector<int64_t>{1, 8, 64, 512} : std::vector<int64_t>{1, 8, 64, 512, 4096};
  if (!g_tokens.empty()) l.tokens = g_tokens;
  const size_t mark = arena.mark();
  if (!moe_layer_fits(arena, l, 2.0 * E * 3 * I * H * (0.5 + 1.0 / 16), 0.0, true)) return;
  alloc_moe_layer(arena, bf16_pool, l);
  // Random codes; every block scale 1.0 (scale values do not change the kernels' work).
  struct Banks {
    W4Format f;
    MoeW4Bank g1, g2;
  };
  std::vector<Banks> banks;
  for (W4Format f : {W4Format::kNvfp4, W4Format::kMxfp4}) {
    Banks b{f, moe_w4_alloc(arena, f, E, 2 * I, H, 2, "moe w4 w1|w3"), moe_w4_alloc(arena, f, E, H, I, 1, "moe w4 w2")};
    const int scale_one = f == W4Format::kNvfp4 ? 9 << 3 : 127;
    for (const MoeW4Bank* m : {&b.g1, &b.g2}) {
      bf16_pool.fill(m->codes, m->code_bytes(), 45 + banks.size());
      K3_CUDA_CHECK(cudaMemset(m->scales, scale_one, m->scale_bytes()));
      const std::vector<float> ones(static_cast<size_t>(m->experts * m->parts), 1.0f);
      moe_w4_upload_out_scale(*m, ones.data());
    }
    banks.push_back(b);
  }
  const GatedActivation situ = k3_situ();
  // The W4A4 option's GEMM 2 input (NVFP4 values of the activation; every input_scale 1).
  const DeviceTensor a4 = arena.alloc_tensor(DType::kBF16, l.r_max(), I, "moe w4a4 activation values");
  const std::vector<float> unit_scales(static_cast<size_t>(E), 1.0f);
  const DeviceTensor input_scale = upload_f32(arena, unit_scales.data(), 1, E, DType::kF32, "w4a4 input scales");
  const std::vector<float> ones(static_cast<size_t>(l.r_max()), 1.0f);
  const float* unit_row_weights = upload_f32(arena, ones.data(), 1, l.r_max(), DType::kF32, "row weights").as<const float>();
  run_moe_layer(arena, stream, l, [](int64_t, int64_t, const Routings&) {}, [&](const MoeGemm& g) {
    std::vector<MoeVariant> vs;
    for (const Banks& b : banks) {
      const MoeW4Bank& w = g.gemm == 1 ? b.g1 : b.g2;
      // auto, the decode kernel (10 and 5 stages), the tile kernels (m16 = the register-prefetch
      // decode-class kernel it replaces where it fits).
      for (W4Kernel kernel : {W4Kernel::kAuto, W4Kernel::kDecode8, W4Kernel::kDecode, W4Kernel::kDecode3, W4Kernel::kM16,
                              W4Kernel::kM64, W4Kernel::kWgmma}) {
        const std::string name =
            kernel == W4Kernel::kAuto
                ? "auto=" + std::string(w4_kernel_name(moe_w4_kernel_for(MoeTile::kAuto, b.f, g.R, E, g.K)))
                : std::string(w4_kernel_name(kernel));
        vs.push_back({std::string(w4_format_name(b.f)) + " " + name, g.rt.hit * g.N * g.K * (0.5 + 1.0 / w4_group(b.f)),
                      [&, w, kernel](int i) { moe_grouped_gemm_w4(g.in, w, g.rt.d[i % kRoutings], g.out, stream, kernel); }});
      }
      // GEMM 1 as the model runs it: after the gather, which lets the decode kernel (a programmatic
      // dependent) start streaming its weights at once. The gather alone is the row below.
      if (g.gemm == 1 && g.T <= 64) {
        vs.push_back({std::string(w4_format_name(b.f)) + " gather+auto", g.rt.hit * g.N * g.K * (0.5 + 1.0 / w4_group(b.f)),
                      [&, w](int i) {
                        const MoeDispatch& d = g.rt.d[i % kRoutings];
                        moe_gather(l.x.row_slice(0, g.T), d, g.in, stream);
                        moe_grouped_gemm_w4(g.in, w, d, g.out, stream, W4Kernel::kAuto);
                      }});
      }
      // GEMM 2 as the model runs it: the routing weights applied in the epilogue (MoeDispatch::row_weight).
      if (g.gemm == 2) {
        vs.push_back({std::string(w4_format_name(b.f)) + " auto+weights", g.rt.hit * g.N * g.K * (0.5 + 1.0 / w4_group(b.f)),
                      [&, w](int i) {
                        moe_grouped_gemm_w4(g.in, w, moe_weighted(g.rt.d[i % kRoutings], unit_row_weights), g.out, stream,
                                            W4Kernel::kAuto);
                      }});
      }
    }
    if (g.gemm == 1) {
      vs.push_back({"situ act", 0.0, [&](int) {
                      gated_activation(situ, g.out.col_slice(0, I), g.out.col_slice(I, I), l.hs.row_slice(0, g.R), stream);
                    }});
    }
    if (g.gemm == 1 && g.T <= 64) {
      vs.push_back({"gather", 0.0, [&](int i) { moe_gather(l.x.row_slice(0, g.T), g.rt.d[i % kRoutings], g.in, stream); }});
    }
    if (g.gemm == 2) {
      const DeviceTensor gu = l.gu.row_slice(0, g.R), out = a4.row_slice(0, g.R);
      const MoeDispatch d = g.rt.d[0];
      const float* scales = input_scale.as<const float>();
      push_gemm2_input_variants(
          vs, "w4a4 situ", gu, g.in,
          [&, gu, out, scales, d](const GatedActivation& act) {
            moe_quantize_nvfp4_activation(act, gu.col_slice(0, I), gu.col_slice(I, I), scales, d, out, stream);
          },
          [&, out, scales, d](const DeviceTensor& hs) { moe_quantize_nvfp4_rows(hs, scales, d, out, stream); }, stream);
    }
    // The routed experts of a decode step as the model runs them: gather, GEMM 1, SiTU, GEMM 2, each a
    // programmatic dependent of the one before (GB: both GEMMs' packed bytes).
    if (g.gemm == 2 && g.T <= 64) {
      const int64_t R = g.R;
      for (const Banks& b : banks) {
        vs.push_back({std::string(w4_format_name(b.f)) + " decode chain", g.rt.hit * 3.0 * I * H * (0.5 + 1.0 / w4_group(b.f)),
                      [&, b, situ, R](int i) {
                        const MoeDispatch& d = g.rt.d[i % kRoutings];
                        const DeviceTensor xs = l.xs.row_slice(0, R), gu = l.gu.row_slice(0, R), hs = l.hs.row_slice(0, R);
                        moe_gather(l.x.row_slice(0, g.T), d, xs, stream);
                        moe_grouped_gemm_w4(xs, b.g1, d, gu, stream, W4Kernel::kAuto);
                        gated_activation(situ, gu.col_slice(0, I), gu.col_slice(I, I), hs, stream);
                        moe_grouped_gemm_w4(hs, b.g2, d, l.ys.row_slice(0, R), stream, W4Kernel::kAuto);
                      }});
      }
    }
    return vs;
  });
  arena.reset(mark);
  bench_w4_dense(arena, stream, bf16_pool);
}

// ---- MoE, ModelSlim W4A8 experts ----------------------------------------------------------------------

namespace {

// A W4A8 bank's scales in the row labels: "chan" (per channel) or "g<group size>".
std::string w4a8_scheme(int64_t group_size) {
  if (group_size <= 0) return "chan";
  std::string s = "g";
  s += std::to_string(group_size);
  return s;
}

}  // namespace

void bench_moe_w4a8(Arena& arena, Stream& stream, const RandomPool& bf16_pool) {
  const int64_t E = MoeLayer::E, H = MoeLayer::H, I = MoeLayer::I;
  const std::vector<int64_t> group_sizes = {0, 256};  // per channel, per group of 256
  print_moe_layer_header("ModelSlim W4A8 experts (int4 x int8 per row, mma s8)",
                         "int4 codes + f32 scales (bf16 weights for bf16)");
  MoeLayer l;
  l.tokens = {1, 8, 64, 512, 4096};
  if (!g_tokens.empty()) l.tokens = g_tokens;
  double bank_bytes = 0;
  for (int64_t gs : group_sizes) bank_bytes += E * 3.0 * I * H * (0.5 + 4.0 / static_cast<double>(gs > 0 ? gs : I));
  const size_t mark = arena.mark();
  if (!moe_layer_fits(arena, l, bank_bytes, l.r_max() * (H + I + 8.0), true)) return;
  alloc_moe_layer(arena, bf16_pool, l);
  // Random codes; every scale the float of bytes 0x3F (≈ 0.747): scale values do not change the kernels' work.
  struct Banks {
    int64_t group_size;
    MoeW4A8Bank g1, g2;
  };
  std::vector<Banks> banks;
  for (int64_t gs : group_sizes) {
    Banks b{gs, moe_w4a8_alloc(arena, E, 2 * I, H, gs, 2, "moe w4a8 w1|w3"), moe_w4a8_alloc(arena, E, H, I, gs, 1, "moe w4a8 w2")};
    for (const MoeW4A8Bank* m : {&b.g1, &b.g2}) {
      bf16_pool.fill(m->codes, m->code_bytes(), 47 + banks.size());
      K3_CUDA_CHECK(cudaMemset(m->scales, 0x3F, m->scale_count() * sizeof(float)));
      const std::vector<float> ones(static_cast<size_t>(m->experts * m->parts), 1.0f);
      moe_w4a8_upload_out_scale(*m, ones.data());
    }
    banks.push_back(b);
  }
  const DeviceTensor xq_all = arena.alloc_tensor(DType::kU8, l.r_max(), H, "moe xs int8");
  const DeviceTensor hq_all = arena.alloc_tensor(DType::kU8, l.r_max(), I, "moe act int8");
  float* xq_scale = arena.alloc_n<float>(static_cast<size_t>(l.r_max()), "moe xs scale");
  float* hq_scale = arena.alloc_n<float>(static_cast<size_t>(l.r_max()), "moe act scale");
  Int8Rows xq, hq;
  run_moe_layer(
      arena, stream, l,
      [&](int64_t, int64_t R, const Routings&) {
        xq = {xq_all.row_slice(0, R), xq_scale};
        hq = {hq_all.row_slice(0, R), hq_scale};
        moe_quantize_int8_rows(l.xs.row_slice(0, R), xq, stream);
        moe_quantize_int8_rows(l.hs.row_slice(0, R), hq, stream);
      },
      [&](const MoeGemm& g) {
        const Int8Rows& inq = g.gemm == 1 ? xq : hq;
        std::vector<MoeVariant> vs;
        vs.push_back({"quant", 0.0, [&](int) { moe_quantize_int8_rows(g.in, inq, stream); }});
        if (g.gemm == 2) {
          const DeviceTensor gu = l.gu.row_slice(0, g.R);
          push_gemm2_input_variants(
              vs, "situ", gu, g.in,
              [&, gu](const GatedActivation& act) {
                moe_quantize_int8_activation(act, gu.col_slice(0, I), gu.col_slice(I, I), hq, stream);
              },
              [&](const DeviceTensor& hs) { moe_quantize_int8_rows(hs, hq, stream); }, stream);
        }
        // The routed experts of a decode step as the model runs them (gather, quantisation, GEMM 1,
        // activation + quantisation in one pass, GEMM 2), and with the activation as its own kernel.
        if (g.gemm == 2 && g.T <= 64) {
          for (const Banks& b : banks) {
            const std::string scheme = w4a8_scheme(b.group_size);
            for (bool apart : {false, true}) {
              vs.push_back({scheme + (apart ? " chain, act apart" : " decode chain"),
                            g.rt.hit * 3.0 * I * H * (0.5 + 4.0 / static_cast<double>(b.g2.group())), [&, b, apart](int i) {
                              const MoeDispatch& d = g.rt.d[i % kRoutings];
                              const DeviceTensor xs = l.xs.row_slice(0, g.R), gu = l.gu.row_slice(0, g.R);
                              moe_gather(l.x.row_slice(0, g.T), d, xs, stream);
                              moe_quantize_int8_rows(xs, xq, stream);
                              moe_grouped_gemm_w4a8(xq, b.g1, d, gu, stream);
                              if (apart) {
                                gated_activation(k3_situ(), gu.col_slice(0, I), gu.col_slice(I, I), g.in, stream);
                                moe_quantize_int8_rows(g.in, hq, stream);
                              } else {
                                moe_quantize_int8_activation(k3_situ(), gu.col_slice(0, I), gu.col_slice(I, I), hq, stream);
                              }
                              moe_grouped_gemm_w4a8(hq, b.g2, d, g.out, stream);
                            }});
            }
          }
        }
        for (const Banks& b : banks) {
          const MoeW4A8Bank& w = g.gemm == 1 ? b.g1 : b.g2;
          const std::string scheme = w4a8_scheme(b.group_size);
          for (MoeTile tile : kW4a8Tiles) {
            vs.push_back({scheme + " " + tile_label(tile, moe_w4a8_tile_for(g.R, E)),
                          g.rt.hit * g.N * g.K * (0.5 + 4.0 / static_cast<double>(w.group())),
                          [&, w, tile](int i) { moe_grouped_gemm_w4a8(inq, w, g.rt.d[i % kRoutings], g.out, stream, tile); }});
          }
        }
        return vs;
      });
  arena.reset(mark);
}

// ---- MoE, GGUF experts -------------------------------------------------------------------------------

// ---- MoE, FP8-block experts ----------------------------------------------------------------------

void bench_moe_fp8_block(Arena& arena, Stream& stream, const RandomPool& fp8_pool, const RandomPool& bf16_pool) {
  const int64_t E = MoeLayer::E, H = MoeLayer::H, I = MoeLayer::I;
  print_moe_layer_header("FP8-block experts (e4m3 codes x 128x128 f32 multipliers decoded to bf16 in shared memory,"
                         " bf16 mma.sync; tile = the grouped GEMM's tile kernel, decode = codes by cp.async)",
                         "packed FP8 bytes (codes + multipliers)");
  MoeLayer l;
  l.tokens = {1, 8, 64, 512};
  if (!g_tokens.empty()) l.tokens = g_tokens;
  const size_t mark = arena.mark();
  const double bank_bytes = 3.0 * E * I * H * (1.0 + 4.0 / (128 * 128));
  if (!moe_layer_fits(arena, l, bank_bytes, 0, true)) return;
  alloc_moe_layer(arena, bf16_pool, l);
  const MoeFp8BlockBank b1 = moe_fp8_block_alloc(arena, E, 2 * I, H, "moe fp8 w1|w3");
  const MoeFp8BlockBank b2 = moe_fp8_block_alloc(arena, E, H, I, "moe fp8 w2");
  for (const MoeFp8BlockBank* b : {&b1, &b2}) {
    fp8_pool.fill(b->codes, b->code_bytes(), 61);
    const std::vector<float> ones(b->scale_bytes() / sizeof(float), 1.0f);
    copy_bytes_to_device(b->scales, ones.data(), b->scale_bytes());
  }
  run_moe_layer(
      arena, stream, l, [](int64_t, int64_t, const Routings&) {},
      [&](const MoeGemm& g) {
        std::vector<MoeVariant> vs;
        const MoeFp8BlockBank& w = g.gemm == 1 ? b1 : b2;
        const double bytes = g.rt.hit * static_cast<double>(w.code_bytes() + w.scale_bytes()) / E;
        const MoeTile tile = moe_tile_for(g.R, E);
        for (Fp8ExpertKernel kernel : {Fp8ExpertKernel::kTile, Fp8ExpertKernel::kDecode}) {
          const bool decode = kernel == Fp8ExpertKernel::kDecode;
          if (decode && tile != MoeTile::kM16) continue;
          const bool is_auto = decode || tile != MoeTile::kM16;
          const std::string label = std::string(decode ? "fp8 decode" : "fp8 tile ") + (decode ? "" : tile_name(tile)) +
                                    (is_auto ? " (auto)" : "");
          vs.push_back({label, bytes, [&, w, kernel](int i) {
                          moe_grouped_gemm_fp8_block(g.in, w, g.rt.d[i % kRoutings], g.out, stream, MoeTile::kAuto, kernel);
                        }});
        }
        return vs;
      });
  arena.reset(mark);
}

void bench_moe_ggml(Arena& arena, Stream& stream, const RandomPool& bf16_pool, const std::vector<GgmlType>& types) {
  const int64_t E = MoeLayer::E, H = MoeLayer::H, I = MoeLayer::I;
  MoeLayer l;
  l.tokens = {1, 8, 64};
  if (!g_tokens.empty()) l.tokens = g_tokens;
  double bank_bytes = 0, acts = 0;
  for (GgmlType t : types) {
    const GgmlTypeInfo& info = ggml_type_info(t);
    bank_bytes += 3.0 * E * I * H / info.block_size * info.type_size;
    acts += 2.0 * moe_ggml_acts_bytes(t, l.r_max(), H);
  }
  // Banks of every type at once where they fit (the default five need about 87 GB: an H200), else one
  // type at a time: the variants compared are those of one type either way.
  if (types.size() > 1 && !moe_layer_fits(arena, l, bank_bytes, acts, false, false)) {
    for (GgmlType t : types) bench_moe_ggml(arena, stream, bf16_pool, {t});
    return;
  }
  print_moe_layer_header("GGUF experts (decode GEMV, int8 activations x GGML blocks, dp4a; gemv includes the"
                         " quantisation, quant alone below; prefill: mma = bf16 tensor-core GEMM over weights decoded"
                         " in shared memory)",
                         "packed GGUF bytes");
  const size_t mark = arena.mark();
  if (!moe_layer_fits(arena, l, bank_bytes, acts, false)) return;
  alloc_moe_layer(arena, bf16_pool, l);
  const std::vector<float> ones(static_cast<size_t>(l.r_max()), 1.0f);
  const float* unit_row_weights = upload_f32(arena, ones.data(), 1, l.r_max(), DType::kF32, "row weights").as<const float>();
  struct Banks {
    GgmlType type;
    MoeGgmlBank g1, g2;
    MoeGgmlActs a1, a2;
  };
  std::vector<Banks> banks;
  for (GgmlType t : types) {
    Banks b{t, moe_ggml_alloc(arena, t, E, 2 * I, H, "moe ggml w1|w3"), moe_ggml_alloc(arena, t, E, H, I, "moe ggml w2"),
            {}, {}};
    bf16_pool.fill(b.g1.data, b.g1.bytes(), 51 + banks.size());
    bf16_pool.fill(b.g2.data, b.g2.bytes(), 53 + banks.size());
    banks.push_back(b);
  }
  run_moe_layer(
      arena, stream, l,
      [&](int64_t, int64_t R, const Routings&) {
        for (Banks& b : banks) {
          b.a1 = moe_ggml_acts_view(arena.alloc(moe_ggml_acts_bytes(b.type, R, H), "acts 1"), b.type, R, H);
          b.a2 = moe_ggml_acts_view(arena.alloc(moe_ggml_acts_bytes(b.type, R, I), "acts 2"), b.type, R, I);
        }
      },
      [&](const MoeGemm& g) {
        std::vector<MoeVariant> vs;
        for (const Banks& b : banks) {
          const MoeGgmlBank& w = g.gemm == 1 ? b.g1 : b.g2;
          const MoeGgmlActs& a = g.gemm == 1 ? b.a1 : b.a2;
          const std::string name(ggml_type_name(b.type));
          const MoeTile model_tile = moe_ggml_tile_for(b.type, g.R, E, w.n);
          // The token chunks the type has (1 and 4, labelled, or 4 alone) at every rows per warp.
          const int auto_chunk = moe_ggml_gemv_token_chunk(b.type, g.R, E);
          const bool both = moe_ggml_gemv_one_token(b.type);
          for (int chunk : {1, 4}) {
            if (chunk == 1 && !both) continue;
            for (int rw : {2, 3, 4}) {
              if (!moe_ggml_gemv_supports(b.type, rw)) continue;
              const bool is_auto = model_tile == MoeTile::kM16 && chunk == auto_chunk &&
                                   rw == moe_ggml_gemv_rows_per_warp(b.type, w.k, chunk);
              const std::string label = (both ? " c" + std::to_string(chunk) : std::string()) + " rw" +
                                        std::to_string(rw) + (is_auto ? " (auto)" : "");
              vs.push_back({name + label, g.rt.hit * w.n * w.row_bytes(), [&, w, a, rw, chunk](int i) {
                              moe_grouped_gemv_ggml(g.in, w, g.rt.d[i % kRoutings], a, g.out, stream, rw, 0, chunk);
                            }});
            }
          }
          vs.push_back({name + " quant", 0.0, [&, a](int) { moe_ggml_quantize(g.in, a, stream); }});
          if (g.gemm == 2 && model_tile == MoeTile::kM16) {  // as the model runs it: routing weights in the epilogue
            vs.push_back({name + " auto+weights", g.rt.hit * w.n * w.row_bytes(), [&, w, a](int i) {
                            moe_grouped_gemv_ggml(g.in, w, moe_weighted(g.rt.d[i % kRoutings], unit_row_weights), a, g.out,
                                                  stream);
                          }});
          }
          if (g.gemm == 2) {
            const DeviceTensor gu = l.gu.row_slice(0, g.R);
            push_gemm2_input_variants(
                vs, name + " situ", gu, g.in,
                [&, gu, a](const GatedActivation& act) {
                  moe_ggml_quantize_activation(act, gu.col_slice(0, I), gu.col_slice(I, I), a, stream);
                },
                [&, a](const DeviceTensor& hs) { moe_ggml_quantize(hs, a, stream); }, stream);
          }
          // The routed experts of a decode step as the model runs them (gather, quantisation, GEMV 1,
          // activation + quantisation in one pass, GEMV 2), and with the activation as its own kernel.
          if (g.gemm == 2 && g.T <= 64) {
            for (bool apart : {false, true}) {
              vs.push_back({name + (apart ? " chain, act apart" : " decode chain"),
                            g.rt.hit * (b.g1.n * b.g1.row_bytes() + b.g2.n * b.g2.row_bytes()), [&, b, apart](int i) {
                              const MoeDispatch& d = g.rt.d[i % kRoutings];
                              const DeviceTensor xs = l.xs.row_slice(0, g.R), gu = l.gu.row_slice(0, g.R);
                              moe_gather(l.x.row_slice(0, g.T), d, xs, stream);
                              moe_ggml_quantize(xs, b.a1, stream);
                              moe_grouped_gemv_ggml(b.a1, b.g1, d, gu, stream);
                              if (apart) {
                                gated_activation(k3_situ(), gu.col_slice(0, I), gu.col_slice(I, I), g.in, stream);
                                moe_ggml_quantize(g.in, b.a2, stream);
                              } else {
                                moe_ggml_quantize_activation(k3_situ(), gu.col_slice(0, I), gu.col_slice(I, I), b.a2, stream);
                              }
                              moe_grouped_gemv_ggml(b.a2, b.g2, d, g.out, stream);
                            }});
            }
          }
          if (g.R < 512 * MoeLayer::k) continue;
          for (MoeTile tile : {MoeTile::kM64, MoeTile::kM128}) {
            const std::string label = " mma m" + std::to_string(moe_tile_rows(tile)) + (tile == model_tile ? " (auto)" : "");
            vs.push_back({name + label, g.rt.hit * w.n * w.row_bytes(), [&, w, tile](int i) {
                            moe_grouped_gemm_ggml(g.in, w, g.rt.d[i % kRoutings], g.out, stream, tile);
                          }});
          }
        }
        return vs;
      });
  arena.reset(mark);
}

}  // namespace k3::cuda::bench
