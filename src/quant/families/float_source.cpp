#include "quant/families/float_source.h"

#include <algorithm>

#include "quant/plan/materialize.h"

namespace k3 {

const ParamSpec& FloatSource::spec(const std::string& name) const {
  for (const ParamSpec& p : params()) {
    if (p.name == name) return p;
  }
  throw Error(Where{"", name, ""}, "no such parameter in the inventory");
}

std::vector<float> MasterSource::read(const ParamSpec& spec, int64_t expert) const {
  const std::vector<float>& v = master_.at(spec.name);
  if (expert < 0) return v;
  const uint64_t per = spec.shape[1] * spec.shape[2];
  const auto first = v.begin() + static_cast<std::ptrdiff_t>(static_cast<uint64_t>(expert) * per);
  return std::vector<float>(first, first + static_cast<std::ptrdiff_t>(per));
}

InventorySource::InventorySource(K3Config config)
    : config_(std::move(config)), params_(parameter_inventory(config_)) {}

std::vector<float> ShapeOnlySource::read(const ParamSpec& spec, int64_t) const {
  throw Error(Where{"", spec.name, ""}, "a header-only layout has no values");
}

SeededSource::SeededSource(K3Config config, uint64_t seed, const RoutingSkew& routing)
    : InventorySource(std::move(config)), seed_(seed) {
  const K3Config& c = this->config();
  check_routing_skew(c, routing, c.file.empty() ? "the config" : c.file);
  if (c.moe) {
    correction_bias_ = routing.zipf > 0 ? skewed_correction_bias(c.moe->num_experts, c.moe->experts_per_token, routing, seed)
                                        : std::vector<float>(static_cast<size_t>(c.moe->num_experts), 0.0f);
  }
}

std::vector<float> SeededSource::read(const ParamSpec& spec, int64_t expert) const {
  if (spec.group == ParamGroup::Router) {
    return spec.kind == ParamKind::Linear ? seeded_router_values(spec, seed_) : correction_bias_;
  }
  return seeded_values(spec, seed_, expert);
}

CheckpointSource::CheckpointSource(const std::string& dir) : ckpt_(open_checkpoint_dir(dir)) {
  if (ckpt_.family != FamilyId::Bf16) {
    throw Error(Where{dir, "", ""}, std::string("is a ") + family_name(ckpt_.family) +
                                        " checkpoint; quantizing needs a dense float one (BF16, F16 or F32 safetensors)");
  }
  if (!ckpt_.config) throw Error(Where{ckpt_.path("config.json"), "", ""}, "missing config.json");
  plan_ = plan_checkpoint(ckpt_);
  if (!plan_.ok()) {
    const size_t more = plan_.problems.size() - 1;
    throw Error(plan_.problems.front().where,
                plan_.problems.front().message +
                    (more ? " (and " + std::to_string(more) + " more problem" + (more > 1 ? "s" : "") + ": k3 check lists them)" : ""));
  }
  files_ = std::make_unique<PlanFiles>(plan_);
}

CheckpointSource::~CheckpointSource() = default;

std::vector<float> CheckpointSource::read(const ParamSpec& spec, int64_t expert) const {
  const int64_t i = plan_.index_of(spec.name);
  if (i < 0) throw Error(Where{ckpt_.dir, spec.name, ""}, "parameter is not in the load plan");
  const Binding& b = plan_.bindings[static_cast<size_t>(i)];
  std::vector<float> out = expert < 0 ? materialize(b, spec, *files_) : materialize_expert(b, spec, *files_, expert);
  for (const SourcePart& part : b.parts) {
    for (size_t t = 0; t < part.tensors.size(); ++t) {
      if (expert < 0 || t == static_cast<size_t>(expert)) files_->release(part.tensors[t]);
    }
  }
  return out;
}

uint64_t CheckpointSource::stored_bytes() const {
  uint64_t total = 0;
  for (const Binding& b : plan_.bindings) total += b.stored_bytes();
  return total;
}

}  // namespace k3
