// The float master of a make-tiny checkpoint: one seeded float32 tensor per parameter of the
// inventory, from which every family's checkpoint is quantized with that producer's own rule.
// Saved as master.safetensors (F32, logical names, expert banks as [E, N, K]).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/parameters.h"

namespace k3 {

struct MasterWeights {
  K3Config config;
  std::vector<ParamSpec> params;
  std::map<std::string, std::vector<float>> values;  // by logical name, row-major in the spec's shape

  const std::vector<float>& at(const std::string& name) const;
  const ParamSpec& spec(const std::string& name) const;
};

// Deterministic for (config, seed): each tensor has its own stream derived from the seed and its name.
MasterWeights make_master(const K3Config& config, uint64_t seed);

void write_master(const MasterWeights& master, const std::string& path);

// make_master's laws drawn per read, nothing held (SeededSource, float_source.h): a matrix's rows
// each from their own stream (seed, name, row), in parallel, their elements bell-shaped without
// transcendental functions; for an expert bank and expert ≥ 0, that expert's [N, K] rows only. Not
// make_master's values (one stream per tensor there, Gaussian elements).
std::vector<float> seeded_values(const ParamSpec& spec, uint64_t seed, int64_t expert = -1);
// A router matrix (ParamGroup::Router, Linear) as seeded_values draws it, but with every row of
// variance 1/K and no outliers: the router model that model/routing_skew.h fits its correction bias for, whose
// picks are uniform over the experts without a bias. (make_master's rows differ in scale, which
// makes the experts with the widest rows win most top-k picks.)
std::vector<float> seeded_router_values(const ParamSpec& spec, uint64_t seed);

}  // namespace k3
