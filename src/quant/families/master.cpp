#include "quant/families/master.h"

#include <cmath>
#include <cstring>

#include "io/safetensors.h"

namespace k3 {
namespace {

// splitmix64: a tiny, well-mixed generator; one stream per tensor.
struct Rng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return (next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
  double normal() {
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Values shaped like trained weights where it matters for the math and the quantizers: unit-ish
// norms, per-head decay logs, linear rows of different magnitudes (so block scales differ) with a
// few outliers (so amax-based scales are not all alike).
std::vector<float> generate(const ParamSpec& p, Rng& rng) {
  std::vector<float> v(p.numel());
  const std::string& n = p.name;
  if (ends_with(n, "A_log")) {
    for (auto& x : v) x = static_cast<float>(std::log(1.0 + 15.0 * rng.uniform()));
  } else if (ends_with(n, "dt_bias") || ends_with(n, "e_score_correction_bias")) {
    for (auto& x : v) x = static_cast<float>(0.1 * rng.normal());
  } else if (p.kind == ParamKind::Vector && ends_with(n, "_proj.weight")) {  // AttnRes projections
    for (auto& x : v) x = static_cast<float>(0.5 * rng.normal());
  } else if (p.kind == ParamKind::Vector) {  // norm weights
    for (auto& x : v) x = static_cast<float>(1.0 + 0.1 * rng.normal());
  } else if (p.kind == ParamKind::Conv) {
    for (auto& x : v) x = static_cast<float>(0.3 * rng.normal());
  } else if (p.kind == ParamKind::Embedding) {
    for (auto& x : v) x = static_cast<float>(rng.normal());
  } else {  // Linear / ExpertBank: rows of varying scale, K = last dim
    const uint64_t k = p.shape.back();
    const double base = 1.0 / std::sqrt(static_cast<double>(k));
    for (uint64_t r = 0; r < v.size() / k; ++r) {
      const double row_scale = base * (0.25 + 1.5 * rng.uniform());
      for (uint64_t c = 0; c < k; ++c) {
        double x = row_scale * rng.normal();
        if (rng.uniform() < 0.002) x *= 8.0;  // outlier
        v[r * k + c] = static_cast<float>(x);
      }
    }
  }
  return v;
}

}  // namespace

const std::vector<float>& MasterWeights::at(const std::string& name) const {
  auto it = values.find(name);
  if (it == values.end()) throw Error(Where{"master", name, ""}, "no such parameter in the master");
  return it->second;
}

const ParamSpec& MasterWeights::spec(const std::string& name) const {
  for (const auto& p : params) {
    if (p.name == name) return p;
  }
  throw Error(Where{"master", name, ""}, "no such parameter in the inventory");
}

MasterWeights make_master(const K3Config& config, uint64_t seed) {
  MasterWeights m{config, parameter_inventory(config), {}};
  for (const auto& p : m.params) {
    Rng rng{seed ^ fnv1a(p.name)};
    m.values.emplace(p.name, generate(p, rng));
  }
  return m;
}

void write_master(const MasterWeights& master, const std::string& path) {
  SafetensorsWriter w;
  for (const auto& p : master.params) {
    const auto& v = master.at(p.name);
    std::vector<uint8_t> bytes(v.size() * sizeof(float));
    std::memcpy(bytes.data(), v.data(), bytes.size());
    w.add(p.name, Dtype::F32, p.shape, std::move(bytes));
  }
  w.set_metadata("format", "pt");
  w.set_metadata("k3", "make-tiny float master");
  w.write(path);
}

}  // namespace k3
