// `k3 bench --family F`: the benchmark's model as a checkpoint of family F at the config's real
// shapes, in the family's own layout, loaded by the same planner and uploader as a real release.
// Its values are drawn from the seed (SeededSource, whose routers route as `routing` says) and quantized by the family's writer; only the
// first `template_experts` routed experts of each bank are computed and written, and the plan reads
// expert e from expert e % template_experts (write_family_sample, alias_template_experts): every
// expert's bytes are in the real layout and place on the device, at a fraction of the writing.
// The checkpoint lives in a fresh folder under `scratch`, removed with the object.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "model/config.h"
#include "model/routing_skew.h"
#include "quant/families/family.h"
#include "quant/families/quantize_options.h"
#include "quant/plan/footprint.h"
#include "quant/plan/load_plan.h"
#include "quant/plan/plan_files.h"

namespace k3::cli {

class SampleCheckpoint {
 public:
  // synthetic: a known config's name or a config.json path (as --synthetic); layers: as --layers
  // (0: all). Throws k3::Error for a family that has no sample (the ExpertPack).
  SampleCheckpoint(FamilyId family, const std::string& synthetic, int64_t layers, uint64_t seed, int64_t template_experts,
                   const std::string& scratch, const QuantizeOptions& quantize = {}, const RoutingSkew& routing = {});
  ~SampleCheckpoint();
  SampleCheckpoint(const SampleCheckpoint&) = delete;
  SampleCheckpoint& operator=(const SampleCheckpoint&) = delete;

  const K3Config& config() const { return config_; }
  const LoadPlan& plan() const { return plan_; }
  PlanFiles& files() { return *files_; }
  // Stored bytes of each parameter (in the plan's order), the template experts' repeated over the bank.
  const Footprint& footprint() const { return footprint_; }
  double seconds_to_write() const { return seconds_; }

 private:
  std::string dir_;
  K3Config config_;
  LoadPlan plan_;
  std::unique_ptr<PlanFiles> files_;
  Footprint footprint_;
  double seconds_ = 0;
};

}  // namespace k3::cli
