// k3_bench_cuda --ggml-dense: GGUF dense linears kept packed as a bank of one expert
// (executor/bank_linear.h), every way the model can multiply one, against the bf16 form.
#include "bench_cuda_moe.h"

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "backend/cuda/gemm/gemm.h"
#include "backend/cuda/moe/moe.h"
#include "quant/formats/ggml/cuda/moe_ggml.h"
#include "quant/formats/ggml/cuda/moe_ggml_tuning.h"

namespace k3::cuda::bench {

void bench_ggml_dense(Arena& arena, Blas& blas, Stream& stream, const RandomPool& bf16_pool) {
  // Kimi-K3's dense linears: an MLP / shared-expert shape, then KDA's q, k, v and gate projections and
  // its output projection.
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{4096, 7168}, {12288, 7168}, {7168, 12288}};
  std::vector<int64_t> tokens = {8, 16, 32, 64, 128, 256, 1024, 4096};
  if (!g_tokens.empty()) tokens = g_tokens;
  std::printf("\nGGUF dense linear as one expert (us; bf16 output). gemv: int8 activations + dp4a (quantisation "
              "included); kernel: the GEMV alone over quantised activations, and its rate on the packed bytes; "
              "mma: the grouped GEMM decoding tiles in shared memory; dequant: moe_ggml_dense_gemm (bf16 chunks + "
              "cuBLASLt); bf16: cuBLASLt over bf16 weights. Model's choice: dequant from %lld rows, else gemv. slices: the GEMV "
              "(quantisation included) at each slice, weight rows per CTA: us\n",
              static_cast<long long>(kGgmlDenseGemmRows));
  std::printf("%-5s %5s %5s %5s | %8s %8s %6s %8s %8s %8s | %-6s | %s\n", "type", "N", "K", "T", "gemv", "kernel",
              "TB/s", "mma", "dequant", "bf16", "dq/bf16", "slices");
  for (const auto& [N, K] : shapes) {
    const size_t mark = arena.mark();
    const DeviceTensor wb = arena.alloc_tensor(DType::kBF16, N, K, "dense bf16 weight");
    bf16_pool.fill(wb.data, static_cast<size_t>(N * K * 2), 81);
    for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q3_K}) {
      const MoeGgmlBank bank = moe_ggml_alloc(arena, type, 1, N, K, "dense ggml");
      bf16_pool.fill(bank.data, bank.bytes(), 82);
      const int rw = moe_ggml_gemv_rows_per_warp(type, K);
      const int group = 8 * rw, widest = 128 / group * group;
      for (int64_t T : tokens) {
        const size_t tmark = arena.mark();
        const DeviceTensor x = arena.alloc_tensor(DType::kBF16, T, K, "dense x");
        bf16_pool.fill(x.data, static_cast<size_t>(T * K * 2), 83);
        const DeviceTensor y = arena.alloc_tensor(DType::kBF16, T, N, "dense y");
        const MoeDispatch d = moe_dispatch_view(arena.alloc(moe_dispatch_bytes(T, 1, 1), "dense dispatch"), T, 1, 1);
        moe_one_expert_dispatch(d, stream);
        const MoeGgmlActs acts =
            moe_ggml_acts_view(arena.alloc(moe_ggml_acts_bytes(type, T, K), "dense acts"), type, T, K);
        moe_ggml_quantize(x, acts, stream);
        std::vector<std::pair<const char*, std::function<void(int)>>> fns = {
            {"mma", [&](int) { moe_grouped_gemm_ggml(x, bank, d, y, stream); }},
            {"dequant", [&](int) { moe_ggml_dense_gemm(blas, arena, x, bank, y, stream); }},
            {"bf16", [&](int) { blas.bf16(x, wb, y, stream); }}};
        const bool gemv = T <= 256;
        if (gemv) {
          fns.push_back({"gemv", [&](int) { moe_grouped_gemv_ggml(x, bank, d, acts, y, stream); }});
          fns.push_back({"kernel", [&](int) { moe_grouped_gemv_ggml(acts, bank, d, y, stream); }});
          for (int s = group; s <= widest; s += group) {
            fns.push_back({"slice", [&, s](int) { moe_grouped_gemv_ggml(x, bank, d, acts, y, stream, rw, s); }});
          }
        }
        const std::vector<double> ms = time_interleaved(stream, fns);
        const auto us = [&](size_t i) { return gemv ? ms[i] * 1e3 : NAN; };
        const std::string name(ggml_type_name(type));
        std::printf("%-5s %5lld %5lld %5lld | %8.1f %8.1f %6.2f %8.1f %8.1f %8.1f | %6.2f |", name.c_str(),
                    static_cast<long long>(N), static_cast<long long>(K), static_cast<long long>(T), us(3), us(4),
                    static_cast<double>(bank.bytes()) / (us(4) * 1e6), ms[0] * 1e3, ms[1] * 1e3, ms[2] * 1e3,
                    ms[1] / ms[2]);
        for (size_t i = 5; i < ms.size(); ++i) std::printf(" %d:%.1f", group * static_cast<int>(i - 4), ms[i] * 1e3);
        std::printf("\n");
        arena.reset(tmark);
      }
    }
    arena.reset(mark);
  }
}

}  // namespace k3::cuda::bench
