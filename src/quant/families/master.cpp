#include "quant/families/master.h"

#include <cmath>
#include <cstring>
#include <span>

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
  // Mean 0, variance 1, bell-shaped on [−2√3, 2√3] (the sum of four uniforms): no transcendental
  // function, for values drawn at real model sizes.
  double quick_normal() {
    constexpr double kInv53 = 1.0 / 9007199254740992.0;
    const double sum = static_cast<double>(next() >> 11) + static_cast<double>(next() >> 11) +
                       static_cast<double>(next() >> 11) + static_cast<double>(next() >> 11);
    return (sum * kInv53 - 2.0) * 1.7320508075688772;
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
// few outliers (so amax-based scales are not all alike). Matrices (linears, expert banks, the
// embedding) are drawn row by row (K = last dim): a row's values depend only on the stream it is
// drawn from.
bool drawn_by_rows(const ParamSpec& p) {
  return p.kind == ParamKind::Linear || p.kind == ParamKind::ExpertBank || p.kind == ParamKind::Embedding;
}

// kQuick: Rng::quick_normal for the elements (seeded_values), else Rng::normal (make_master).
// kEvenRows: every row of variance 1/K, no outliers (seeded_router_values).
template <bool kQuick, bool kEvenRows = false>
void draw_row(const ParamSpec& p, Rng& rng, std::span<float> row) {
  const auto normal = [&rng] { return kQuick ? rng.quick_normal() : rng.normal(); };
  if (p.kind == ParamKind::Embedding) {
    for (auto& x : row) x = static_cast<float>(normal());
    return;
  }
  if constexpr (kEvenRows) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(row.size()));
    for (auto& x : row) x = static_cast<float>(scale * normal());
    return;
  }
  const double base = 1.0 / std::sqrt(static_cast<double>(row.size()));
  const double row_scale = base * (0.25 + 1.5 * rng.uniform());
  for (auto& x : row) {
    double v = row_scale * normal();
    if (rng.uniform() < 0.002) v *= 8.0;  // outlier
    x = static_cast<float>(v);
  }
}

void draw_vector(const ParamSpec& p, Rng& rng, std::span<float> v) {
  const std::string& n = p.name;
  if (ends_with(n, "A_log")) {
    for (auto& x : v) x = static_cast<float>(std::log(1.0 + 15.0 * rng.uniform()));
  } else if (ends_with(n, "dt_bias") || ends_with(n, "e_score_correction_bias")) {
    for (auto& x : v) x = static_cast<float>(0.1 * rng.normal());
  } else if (p.kind == ParamKind::Vector && ends_with(n, "_proj.weight")) {  // AttnRes projections
    for (auto& x : v) x = static_cast<float>(0.5 * rng.normal());
  } else if (p.kind == ParamKind::Vector) {  // norm weights
    for (auto& x : v) x = static_cast<float>(1.0 + 0.1 * rng.normal());
  } else {  // Conv
    for (auto& x : v) x = static_cast<float>(0.3 * rng.normal());
  }
}

// make_master's draw: one stream for the whole tensor.
std::vector<float> generate(const ParamSpec& p, Rng& rng) {
  std::vector<float> v(p.numel());
  if (!drawn_by_rows(p)) {
    draw_vector(p, rng, v);
    return v;
  }
  const uint64_t k = p.shape.back();
  for (uint64_t r = 0; r < v.size() / k; ++r) draw_row<false>(p, rng, std::span<float>(v).subspan(r * k, k));
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

namespace {

template <bool kEvenRows>
std::vector<float> seeded_rows(const ParamSpec& p, uint64_t seed, int64_t expert) {
  const uint64_t stream = seed ^ fnv1a(p.name);
  if (!drawn_by_rows(p)) {
    Rng rng{stream};
    std::vector<float> v(p.numel());
    draw_vector(p, rng, v);
    return v;
  }
  const uint64_t k = p.shape.back();
  const uint64_t rows = (expert >= 0 ? p.shape[1] : p.numel() / k);
  const uint64_t first_row = expert >= 0 ? static_cast<uint64_t>(expert) * rows : 0;
  std::vector<float> v(rows * k);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < static_cast<int64_t>(rows); ++r) {
    Rng rng{stream ^ (0x9E3779B97F4A7C15ull * (first_row + static_cast<uint64_t>(r) + 1))};
    draw_row<true, kEvenRows>(p, rng, std::span<float>(v).subspan(static_cast<uint64_t>(r) * k, k));
  }
  return v;
}

}  // namespace

std::vector<float> seeded_values(const ParamSpec& p, uint64_t seed, int64_t expert) {
  return seeded_rows<false>(p, seed, expert);
}

std::vector<float> seeded_router_values(const ParamSpec& p, uint64_t seed) {
  if (p.group != ParamGroup::Router || p.kind != ParamKind::Linear) {
    throw Error(Where{"", p.name, ""}, "internal: not a router matrix");
  }
  return seeded_rows<true>(p, seed, -1);
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
