// synthetic_weights (device_weights.h): build_weights over a filler that generates every member on
// the GPU from a counter-based hash, value(i) = law(hash(key, i)), with one key per member drawn from
// the seed and the member's position in the walk. Nothing is copied from the host but a skewed
// routing's correction biases (fitted on the host); the shapes are the parameter inventory's
// (model/parameters.h), so they are exactly the uploader's.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <random>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/upload.h"
#include "backend/cuda/executor/device_weights.h"
#include "model/parameters.h"

namespace k3::cuda {
namespace {

// The splitmix64 finaliser: a bijection of 64-bit words whose output bits each depend on every input bit.
__host__ __device__ inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// How element i of a member is drawn from u = U[0, 1).
enum class Law : uint8_t {
  kUniform,     // lo + (hi − lo)·u
  kLogUniform,  // log(lo + (hi − lo)·u)
  kConvTaps,    // lo + (hi − lo)·u, plus 1 on the last tap of each channel (i % period == period − 1)
};

struct Draw {
  Law law = Law::kUniform;
  float lo = 0, hi = 0;
  int64_t period = 1;
};

__device__ inline void store(float* p, float v) { *p = v; }
__device__ inline void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

template <typename T>
__global__ void fill_kernel(T* __restrict__ out, int64_t n, uint64_t key, Draw d) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float u = static_cast<float>(mix64(key + static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull) >> 40) * 0x1p-24f;
    float v = d.lo + (d.hi - d.lo) * u;
    if (d.law == Law::kLogUniform) v = logf(v);
    if (d.law == Law::kConvTaps && i % d.period == d.period - 1) v += 1.0f;
    store(out + i, v);
  }
}

constexpr Draw kZeros{Law::kUniform, 0.0f, 0.0f};

// Matrices: uniform with variance 1/K, so y = x·Wᵀ keeps the scale of x.
Draw matrix_draw(int64_t k) {
  const float bound = std::sqrt(3.0f / static_cast<float>(k));
  return {Law::kUniform, -bound, bound};
}

Draw vector_draw(VectorRole role) {
  switch (role) {
    case VectorRole::kNormWeight: return {Law::kUniform, 1.0f, 1.0f};
    case VectorRole::kALog: return {Law::kLogUniform, 1.0f, 16.0f};  // decay rates exp(A_log) in [1, 16)
    case VectorRole::kDtBias: return {Law::kUniform, -0.1f, 0.1f};
    case VectorRole::kCorrectionBias: return kZeros;  // every expert on equal terms
  }
  return {};
}

constexpr float kResScoreBound = 0.05f;  // AttnRes: near-uniform mixing over the sources

class Generator final : public WeightFiller {
 public:
  Generator(Arena& arena, const K3Config& config, uint64_t seed, const RoutingSkew& routing) : arena_(arena), seed_(seed) {
    for (ParamSpec& p : parameter_inventory(config)) specs_.emplace(p.name, std::move(p));
    check_routing_skew(config, routing, config.file.empty() ? "the config" : config.file);
    if (routing.zipf > 0) skew_bias_ = skewed_correction_bias(config.moe->num_experts, config.moe->experts_per_token, routing, seed);
  }

  DeviceTensor embedding(const std::string& name) override { return matrix(name); }
  DeviceLinear linear(const std::string& name) override { return bf16_linear(name); }
  DeviceLinear bf16_linear(const std::string& name) override {
    DeviceLinear w;
    w.kind = DeviceLinear::Kind::kBf16;
    w.bf16 = matrix(name);
    w.n = w.bf16.rows;
    w.k = w.bf16.cols;
    return w;
  }

  DeviceExperts experts(const std::string& first, const std::string& second) override {
    const ParamSpec& s = spec(first);
    const int64_t E = dim(s, 0), K = dim(s, 2);
    const int64_t rows_per_expert = dim(s, 1) + (second.empty() ? 0 : dim(spec(second), 1));
    DeviceExperts bank;
    bank.bf16 = alloc(DType::kBF16, E * rows_per_expert, K, first);
    fill(bank.bf16, matrix_draw(K));
    return bank;
  }

  DeviceVector vector(const std::string& name, VectorRole role) override {
    if (role == VectorRole::kCorrectionBias && !skew_bias_.empty()) return skewed_bias(name);
    return filled_vector(static_cast<int64_t>(spec(name).numel()), vector_draw(role), name);
  }
  DeviceVector zeros(int64_t n, const std::string& what) override {
    return filled_vector(n, kZeros, what);
  }
  DeviceVector res_score(const std::string& prefix) override {
    const int64_t n = static_cast<int64_t>(spec(prefix + "_norm.weight").numel());
    return filled_vector(n, {Law::kUniform, -kResScoreBound, kResScoreBound}, prefix + " score");
  }
  // Taps ±0.5/√W around an identity on the newest token, so the conv passes its input through.
  DeviceVector kda_conv(const std::string& prefix) override {
    const ParamSpec& q = spec(prefix + "q_conv1d.weight");  // [P, 1, W]
    const int64_t width = dim(q, 2);
    const float bound = 0.5f / std::sqrt(static_cast<float>(width));
    return filled_vector(3 * static_cast<int64_t>(q.numel()), {Law::kConvTaps, -bound, bound, width},
                         prefix + "q|k|v conv1d");
  }

  // W_UK and W_UV are copies of kv_b's rows (two strided device copies), so the absorbed decode and
  // the prefill see the same weights.
  void absorb_kv_b(const std::string& name, const MlaConfig& m, DeviceMla& w) override {
    const int64_t heads = m.num_heads, dn = m.qk_nope_head_dim, dv = m.v_head_dim, r = m.kv_lora_rank;
    w.absorbed.w_uk = alloc(DType::kBF16, heads * dn, r, name + " W_UK");
    w.absorbed.w_uv = alloc(DType::kBF16, heads * dv, r, name + " W_UV");
    const size_t row = static_cast<size_t>(r) * sizeof(uint16_t), head_pitch = (dn + dv) * row;
    const char* kv_b = static_cast<const char*>(w.kv_b.bf16.data);
    K3_CUDA_CHECK(cudaMemcpy2DAsync(w.absorbed.w_uk.data, dn * row, kv_b, head_pitch, dn * row, heads,
                                    cudaMemcpyDeviceToDevice));
    K3_CUDA_CHECK(cudaMemcpy2DAsync(w.absorbed.w_uv.data, dv * row, kv_b + dn * row, head_pitch, dv * row, heads,
                                    cudaMemcpyDeviceToDevice));
  }

 private:
  const ParamSpec& spec(const std::string& name) const {
    const auto it = specs_.find(name);
    if (it == specs_.end()) throw Error(Where{"", name, ""}, "parameter is not in the config's inventory");
    return it->second;
  }
  static int64_t dim(const ParamSpec& s, size_t i) { return static_cast<int64_t>(s.shape.at(i)); }

  DeviceTensor alloc(DType dtype, int64_t rows, int64_t cols, const std::string& what) {
    const DeviceTensor t = arena_.alloc_tensor(dtype, rows, cols, what.c_str());
    bytes_ += t.bytes();
    return t;
  }

  // A [rows, cols] parameter (linear or embedding) as bf16 with variance 1/cols.
  DeviceTensor matrix(const std::string& name) {
    const ParamSpec& s = spec(name);
    const DeviceTensor t = alloc(DType::kBF16, dim(s, 0), dim(s, 1), name);
    fill(t, matrix_draw(t.cols));
    return t;
  }

  DeviceVector filled_vector(int64_t n, const Draw& d, const std::string& what) {
    const DeviceTensor t = alloc(DType::kF32, 1, n, what);
    fill(t, d);
    return t.as<float>();
  }

  // The fitted skew with this layer's popularity order: expert perm[i] gets the i-th hottest bias.
  DeviceVector skewed_bias(const std::string& name) {
    std::vector<int64_t> perm(skew_bias_.size());
    std::iota(perm.begin(), perm.end(), 0);
    std::mt19937_64 rng(mix64(seed_ ^ std::hash<std::string>{}(name)));
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<float> bias(skew_bias_.size());
    for (size_t i = 0; i < perm.size(); ++i) bias[static_cast<size_t>(perm[i])] = skew_bias_[i];
    const DeviceTensor t = upload_f32(arena_, bias.data(), 1, static_cast<int64_t>(bias.size()), DType::kF32, name.c_str());
    bytes_ += t.bytes();
    return t.as<float>();
  }

  // Each member gets its own key: the seed mixed with the member's position in the walk.
  void fill(const DeviceTensor& t, const Draw& d) {
    const int64_t n = t.numel();
    if (n == 0) return;
    const uint64_t key = mix64(seed_ ^ mix64(++members_));
    constexpr int kThreads = 256;
    const int blocks = static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 8192));
    if (t.dtype == DType::kBF16) {
      fill_kernel<<<blocks, kThreads>>>(t.as<__nv_bfloat16>(), n, key, d);
    } else {
      fill_kernel<<<blocks, kThreads>>>(t.as<float>(), n, key, d);
    }
    K3_CUDA_CHECK_LAUNCH("fill_kernel");
  }

  Arena& arena_;
  uint64_t seed_;
  uint64_t members_ = 0;
  std::map<std::string, ParamSpec> specs_;
  std::vector<float> skew_bias_;  // --routing zipf:S: the fitted correction bias, hottest first; empty: uniform
};

}  // namespace

DeviceWeights synthetic_weights(Arena& arena, const K3Config& config, uint64_t seed, ExpertBankSink* sink,
                                const RoutingSkew& routing) {
  Generator generator(arena, config, seed, routing);
  DeviceWeights w = build_weights(generator, config, &arena, sink);
  // The fills ran on the legacy default stream; the executor's streams do not wait for it.
  K3_CUDA_CHECK(cudaDeviceSynchronize());
  return w;
}

}  // namespace k3::cuda
