// The block ops on the CUDA target: the checkpoint uploaded by the CUDA backend's uploader
// (upload_weights: bf16 / FP8 linears, routed experts packed for the NVFP4 / MXFP4 / W4A8 / GGUF
// expert kernels), one sequence in state slot 0, and the executor's blocks (step.h: kda_block,
// mla_block, moe_block, mlp_block) run step by step as CudaModel runs them — a prefill step, then one
// decode step per further row, with the step metadata CudaModel::upload_meta builds for one
// sequence. Mixers whose dims are not the fast kernels' (KDA head dim 128; MLA 128/64/128/512) run the
// generic kernels there, as they do in the model.
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>

#include "backend/cuda/attention/mla/mla.h"
#include "backend/cuda/core/check.h"
#include "backend/cuda/executor/device_weights.h"
#include "backend/cuda/executor/step.h"
#include "cuda_target.h"

namespace k3::op_parity {
namespace {

using cuda::DType;

constexpr int64_t kPage = cuda::kMlaDecodeTile;

// The state of one sequence (slot 0) for `layer`, zeroed: the KDA pool or the MLA latent cache.
std::vector<cuda::LayerState> layer_state(CudaDevice& d, const K3Config& c, int64_t layer, int64_t context) {
  std::vector<cuda::LayerState> state(static_cast<size_t>(c.num_layers));
  cuda::LayerState& st = state.at(static_cast<size_t>(layer));
  if (c.is_kda(layer)) {
    st.kda.slots = 1;
    st.kda.heads = c.kda.num_heads;
    st.kda.head_dim = c.kda.head_dim;
    st.kda.conv_width = c.kda.short_conv_kernel_size;
    const size_t recurrent = st.kda.recurrent_floats_per_slot(), conv = st.kda.conv_floats_per_slot();
    st.kda.recurrent = d.arena.alloc_n<float>(recurrent, "kda recurrent state");
    st.kda.conv = d.arena.alloc_n<float>(conv, "kda conv state");
    K3_CUDA_CHECK(cudaMemsetAsync(st.kda.recurrent, 0, recurrent * sizeof(float), d.stream));
    K3_CUDA_CHECK(cudaMemsetAsync(st.kda.conv, 0, conv * sizeof(float), d.stream));
  } else {
    st.cache = d.arena.alloc_tensor(DType::kBF16, context, c.mla.kv_lora_rank + c.mla.qk_rope_head_dim, "mla cache");
    K3_CUDA_CHECK(cudaMemsetAsync(st.cache.data, 0, st.cache.bytes(), d.stream));
  }
  return state;
}

// StepMeta of one step of one sequence in slot 0: `n` new rows after `length` cached ones; the int32
// arrays in the arena (the caller's scope gives them back).
cuda::StepMeta step_meta(CudaDevice& d, int64_t length, int64_t n, int64_t context) {
  const int64_t after = length + n, pages = context / kPage;
  std::vector<int32_t> h;
  const auto take = [&h](size_t count) {
    const size_t at = h.size();
    h.resize(at + count, 0);
    return at;
  };
  const size_t ids = take(n), cu_q = take(2), slots = take(1), seqlens = take(1), cache_dst = take(n), cu_kv = take(2),
               tables = take(pages), logit_rows = take(n), kv_src = take(after);
  h[cu_q + 1] = static_cast<int32_t>(n);
  h[seqlens] = h[cu_kv + 1] = static_cast<int32_t>(after);
  for (int64_t t = 0; t < n; ++t) {
    h[cache_dst + t] = static_cast<int32_t>(length + t);
    h[logit_rows + t] = static_cast<int32_t>(t);
  }
  for (int64_t p = 0; p < pages; ++p) h[tables + p] = static_cast<int32_t>(p);
  for (int64_t j = 0; j < after; ++j) h[kv_src + j] = static_cast<int32_t>(j);
  int32_t* dev = d.arena.alloc_n<int32_t>(h.size(), "step metadata");
  cuda::copy_bytes_to_device(dev, h.data(), h.size() * sizeof(int32_t));
  cuda::StepMeta m;
  m.n = 1;
  m.rows = n;
  m.decode = n == 1;
  m.max_q = static_cast<int>(n);
  m.max_kv = static_cast<int>(after);
  m.kv_rows = after;
  m.ids = dev + ids;
  m.cu_q = dev + cu_q;
  m.slots = dev + slots;
  m.seqlens = dev + seqlens;
  m.cache_dst = dev + cache_dst;
  m.cu_kv = dev + cu_kv;
  m.kv_src = dev + kv_src;
  m.block_table = dev + tables;
  m.block_table_ld = pages;
  m.logit_rows = dev + logit_rows;
  return m;
}

}  // namespace

std::vector<float> CudaTarget::block(const std::string& op, const K3Config& config, const LoadPlan& plan,
                                     PlanFiles& files, int64_t layer, const std::vector<float>& x, int64_t rows,
                                     int64_t prefill) {
  DeviceScope scope;
  CudaDevice& d = scope.device();
  const int64_t H = config.hidden_size;
  if (static_cast<int64_t>(x.size()) != rows * H) throw std::logic_error("block: input size mismatch");
  const cuda::DeviceWeights weights = cuda::upload_weights(d.arena, config, plan, files, cuda::UploadOptions{});
  const cuda::DeviceLayer& w = weights.layers.at(static_cast<size_t>(layer));
  const bool mixer = op == "kda" || op == "mla";
  const int64_t context = (rows + kPage - 1) / kPage * kPage;  // one sequence's cache rows, whole pages
  std::vector<cuda::LayerState> state = layer_state(d, config, layer, context);

  std::vector<float> out;
  int64_t length = 0;
  while (length < rows) {
    const int64_t n = !mixer ? rows : length == 0 ? std::min(prefill, rows) : 1;
    const size_t mark = d.arena.mark();
    const std::vector<float> part(x.begin() + length * H, x.begin() + (length + n) * H);
    const cuda::DeviceTensor xd = upload(part, n, H, DType::kBF16, "block input");  // the normed rows: bf16
    const cuda::DeviceTensor y = d.arena.alloc_tensor(DType::kF32, n, H, "block output");
    cuda::StepContext ctx{config, weights, state, d.arena, d.blas, d.stream.get(), d.multiprocessors, static_cast<int>(kPage),
                          step_meta(d, length, n, context)};
    if (op == "kda") {
      cuda::kda_block(ctx, layer, w.kda, xd, y);
    } else if (op == "mla") {
      cuda::mla_block(ctx, layer, w.mla, xd, y);
    } else if (op == "moe") {
      cuda::moe_block(ctx, layer, w.moe, xd, y);
    } else if (op == "mlp") {
      cuda::mlp_block(ctx, w.mlp, xd, y);
    } else {
      throw std::logic_error("block: unknown op " + op);
    }
    const std::vector<float> got = download(y);
    out.insert(out.end(), got.begin(), got.end());
    d.arena.reset(mark);
    length += n;
  }
  return out;
}

}  // namespace k3::op_parity
