// Ops without linear weights (fp32 vectors or none), against float64 references written here from
// the spec (k3-architecture.md §2.1 activations, §3.2 AttnRes mix, §7.1 router): rms_norm,
// attn_res_mix_norm, the gated activation (SiLU and SiTU, with the scale-contract α factors) and the
// router's route(). Rows 1 and 37 of an odd width.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "backend/cpu/ops.h"
#include "cuda_ops.h"
#include "fixtures.h"
#include "tolerances.h"

namespace k3::op_parity {
namespace {

// Rows 1 and 37 of an odd width (no vector-width multiple) and of a multiple of 8 (the CUDA vector
// kernels' requirement, as every model width).
struct Shape {
  int64_t rows, width;
};
constexpr Shape kShapes[] = {{1, 259}, {37, 259}, {1, 264}, {37, 264}};
constexpr double kEps = 1e-5;

using Vec = std::vector<double>;

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

Vec rms_norm_ref(const Vec& x, const std::vector<float>& w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double r = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * r * w[i];
  return y;
}

std::vector<float> norm_weight(uint32_t seed, int64_t width) {
  std::vector<float> w = random_values(1, width, seed, 0.1);
  for (float& v : w) v += 1.0f;
  return w;
}

OpCase pointwise_case(const std::string& op, const std::string& variant, int64_t rows, int64_t width,
                      double cuda_tolerance) {
  OpCase c;
  c.op = op;
  c.formats = {"vec"};
  c.name = (variant.empty() ? "" : variant + "__") + "rows" + std::to_string(rows) + "_w" + std::to_string(width);
  c.shape = (variant.empty() ? "" : variant + " ") + "w" + std::to_string(width) + " rows" + std::to_string(rows);
  c.source = "random";
  c.cuda_skip = cuda_width_unsupported(width);
  c.cuda_tolerance = cuda_tolerance;
  return c;
}

void add_rms_norm(std::vector<OpCase>& out) {
  for (const Shape& shape : kShapes) {
    const int64_t rows = shape.rows, width = shape.width;
    OpCase c = pointwise_case("rms_norm", "", rows, width, kCudaRmsNormTolerance);
    const auto x = random_values(rows, width, 11, 1.0, true);
    const auto w = norm_weight(12, width);
    c.reference = [=] {
      Expectation e{{}, width, {}, kRmsNormTolerance, {}, "float64 x·w/√(mean x² + ε)"};
      for (const Vec& row : rows_of(x, rows, width)) {
        const Vec y = rms_norm_ref(row, w, kEps);
        e.want.insert(e.want.end(), y.begin(), y.end());
      }
      return e;
    };
    c.run = [=](const Target& target) {
      if (target.kind == TargetKind::Cuda) return cuda_ops()->rms_norm(x, rows, width, w, kEps);
      Tensor y;
      cpu_backend().rms_norm(tensor_of(x, rows, width), w, kEps, y);
      return y.data;
    };
    out.push_back(std::move(c));
  }
}

// AttnResMix (spec §3.2): softmax over candidates of ⟨v, c⟩ / rms(v), the weighted sum, then RMSNorm.
void add_attn_res_mix_norm(std::vector<OpCase>& out) {
  constexpr int kCandidates = 4;  // three bank entries and the running sum
  for (const Shape& shape : kShapes) {
    const int64_t rows = shape.rows, width = shape.width;
    OpCase c = pointwise_case("attn_res_mix_norm", "cand4", rows, width, kCudaAttnResMixNormTolerance);
    std::vector<std::vector<float>> cand;
    for (int j = 0; j < kCandidates; ++j) cand.push_back(random_values(rows, width, 20 + j, 0.5 + j, true));
    const auto score = random_values(1, width, 30, 0.1);
    const auto w = norm_weight(31, width);
    c.reference = [=] {
      Expectation e{{}, width, {}, kAttnResMixNormTolerance, {}, "float64 softmax-mix over 4 candidates, RMSNorm"};
      for (int64_t t = 0; t < rows; ++t) {
        Vec p(kCandidates), mix(width, 0.0);
        for (int j = 0; j < kCandidates; ++j) {
          double ss = 0, dot = 0;
          for (int64_t i = 0; i < width; ++i) {
            const double v = cand[j][t * width + i];
            ss += v * v;
            dot += v * score[i];
          }
          p[j] = dot / std::sqrt(ss / width + kEps);
        }
        const double mx = *std::max_element(p.begin(), p.end());
        double sum = 0;
        for (double& s : p) sum += (s = std::exp(s - mx));
        for (int j = 0; j < kCandidates; ++j) {
          for (int64_t i = 0; i < width; ++i) mix[i] += p[j] / sum * cand[j][t * width + i];
        }
        const Vec y = rms_norm_ref(mix, w, kEps);
        e.want.insert(e.want.end(), y.begin(), y.end());
      }
      return e;
    };
    c.run = [=](const Target& target) {
      if (target.kind == TargetKind::Cuda) return cuda_ops()->attn_res_mix_norm(cand, rows, width, score, w, kEps);
      std::vector<Tensor> tensors;
      for (const auto& v : cand) tensors.push_back(tensor_of(v, rows, width));
      std::vector<const Tensor*> ptrs;
      for (const Tensor& t : tensors) ptrs.push_back(&t);
      Tensor y;
      cpu_backend().attn_res_mix_norm(ptrs, score, w, kEps, y);
      return y.data;
    };
    out.push_back(std::move(c));
  }
}

// act(g·α_g, u·α_u): SiLU(g)·u, or SiTU: β·tanh(g/β)·σ(g) · (β_lin·tanh(u/β_lin) or u) (spec §2.1).
void add_gated_activation(std::vector<OpCase>& out) {
  struct Variant {
    const char* name;
    ActivationConfig act;
  };
  const Variant variants[] = {{"silu", {Activation::kSilu, 1.0, std::nullopt}},
                              {"situ_b4_lin25", {Activation::kSitu, 4.0, 25.0}},
                              {"situ_b4", {Activation::kSitu, 4.0, std::nullopt}}};
  constexpr float kGateAlpha = 0.75f, kUpAlpha = 1.5f;  // the scale contract's α_gate, α_up
  for (const Variant& v : variants) {
    for (const Shape& shape : kShapes) {
    const int64_t rows = shape.rows, width = shape.width;
      OpCase c = pointwise_case("gated_activation", v.name, rows, width, kCudaGatedActivationTolerance);
      const ActivationConfig act = v.act;
      // Wide enough that SiTU's caps (tanh(g/4), tanh(u/25)) are reached.
      const auto gate = random_values(rows, width, 40, 4.0, true), up = random_values(rows, width, 41, 12.0, true);
      c.reference = [=] {
        Expectation e{{}, width, {}, kGatedActivationTolerance, {}, "float64 act(g·α_g, u·α_u)"};
        for (size_t i = 0; i < gate.size(); ++i) {
          const double g = static_cast<double>(gate[i]) * kGateAlpha, u = static_cast<double>(up[i]) * kUpAlpha;
          if (act.kind == Activation::kSilu) {
            e.want.push_back(g * sigmoid(g) * u);
          } else {
            const double b = act.situ_beta;
            const double capped = act.situ_linear_beta ? *act.situ_linear_beta * std::tanh(u / *act.situ_linear_beta) : u;
            e.want.push_back(b * std::tanh(g / b) * sigmoid(g) * capped);
          }
        }
        return e;
      };
      c.run = [=](const Target& target) {
        if (target.kind == TargetKind::Cuda) {
          return cuda_ops()->gated_activation(act, gate, up, rows, width, kGateAlpha, kUpAlpha);
        }
        Tensor g = tensor_of(gate, rows, width);
        cpu::gated_activation(act, g, tensor_of(up, rows, width), kGateAlpha, kUpAlpha);
        return g.data;
      };
      out.push_back(std::move(c));
    }
  }
}

}  // namespace


namespace {

MoeConfig router(int64_t experts, int64_t top_k, RouterScoring scoring, int64_t groups, int64_t topk_group,
                 bool renormalize, double scaling) {
  MoeConfig m;
  m.num_experts = experts;
  m.experts_per_token = top_k;
  m.scoring = scoring;
  m.use_grouped_topk = groups > 1;
  m.num_expert_group = groups;
  m.topk_group = topk_group;
  m.renormalize = renormalize;
  m.routed_scaling_factor = scaling;
  return m;
}

// N(0, 1.5) logits for `rows` tokens; a token whose choice would be decided by less than
// kRouteMinMargin (a near-tie that float32 rounding could flip) is drawn again.
std::vector<float> router_logits(const MoeConfig& m, int64_t rows, const std::vector<float>& bias) {
  const int64_t E = m.num_experts;
  const std::vector<double> b(bias.begin(), bias.end());
  std::vector<float> out;
  for (int64_t t = 0; t < rows; ++t) {
    for (uint32_t attempt = 0;; ++attempt) {
      const auto row = random_values(1, E, static_cast<uint32_t>(50 + E + 1000 * t + attempt), 1.5);
      const std::vector<double> token(row.begin(), row.end());
      if (reference::route(m, token.data(), b).margin < 2 * kRouteMinMargin) continue;
      out.insert(out.end(), row.begin(), row.end());
      break;
    }
  }
  return out;
}

void add_route(std::vector<OpCase>& out) {
  struct Variant {
    const char* name;
    MoeConfig m;
  };
  const Variant variants[] = {
      {"k3_sigmoid_e8_top2", router(8, 2, RouterScoring::kSigmoid, 1, 1, true, 1.0)},
      {"linear_sigmoid_e8_top2_groups2", router(8, 2, RouterScoring::kSigmoid, 2, 1, true, 2.446)},
      {"sigmoid_e64_top6_groups8_keep3", router(64, 6, RouterScoring::kSigmoid, 8, 3, true, 2.5)},
      {"softmax_e16_top4_unnormalised", router(16, 4, RouterScoring::kSoftmax, 1, 1, false, 1.5)},
  };
  for (const Variant& v : variants) {
    for (const int64_t rows : {int64_t{1}, int64_t{37}}) {
      const MoeConfig m = v.m;
      const int64_t E = m.num_experts, k = m.experts_per_token;
      OpCase c;
      c.op = "route";
      c.formats = {"vec"};
      c.name = std::string(v.name) + "__rows" + std::to_string(rows);
      c.shape = std::string(v.name) + " rows" + std::to_string(rows);
      c.source = "random logits and correction bias";
      c.cuda_tolerance = kCudaRouteTolerance;
      const auto bias = random_values(1, E, static_cast<uint32_t>(60 + E), 0.1);
      const auto logits = router_logits(m, rows, bias);
      c.reference = [=] {
        Expectation e{{}, 2 * k, {}, kRouteTolerance, {}, "float64 router (spec §7.1); [expert, weight] per choice"};
        for (int64_t t = 0; t < rows; ++t) {
          const std::vector<double> token(logits.begin() + t * E, logits.begin() + (t + 1) * E);
          const reference::RouteRef r = reference::route(m, token.data(), std::vector<double>(bias.begin(), bias.end()));
          if (r.margin < kRouteMinMargin) {
            throw std::runtime_error("route fixture: token " + std::to_string(t) + " has a selection margin of " +
                                     std::to_string(r.margin) + " (below kRouteMinMargin)");
          }
          for (const auto& [expert, weight] : r.picked) {
            e.exact.push_back(e.want.size());
            e.want.push_back(static_cast<double>(expert));
            e.want.push_back(weight);
          }
        }
        return e;
      };
      c.run = [=](const Target& target) {
        if (target.kind == TargetKind::Cuda) return cuda_ops()->route(m, logits, rows, bias);
        std::vector<float> got;
        for (int64_t t = 0; t < rows; ++t) {
          for (const cpu::Route& r : cpu::route(m, logits.data() + t * E, bias)) {
            got.push_back(static_cast<float>(r.expert));
            got.push_back(r.weight);
          }
        }
        return got;
      };
      out.push_back(std::move(c));
    }
  }
}

}  // namespace

std::vector<OpCase> pointwise_cases() {
  std::vector<OpCase> out;
  add_rms_norm(out);
  add_attn_res_mix_norm(out);
  add_gated_activation(out);
  add_route(out);
  return out;
}

}  // namespace k3::op_parity
