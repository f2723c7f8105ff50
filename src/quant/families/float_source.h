// The float model a family writer quantizes, read one parameter (or one expert of a bank) at a time:
// make-tiny's seeded master in memory, or a dense float checkpoint on disk (k3 quantize). Writers
// hold what one read returns and nothing more, so a checkpoint of any size streams through.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/routing_skew.h"
#include "quant/families/family.h"
#include "quant/families/master.h"
#include "quant/plan/plan_files.h"

namespace k3 {

class FloatSource {
 public:
  virtual ~FloatSource() = default;
  virtual const K3Config& config() const = 0;
  virtual const std::vector<ParamSpec>& params() const = 0;
  // The parameter as float32, row-major in spec.shape; for an expert bank and expert ≥ 0, that
  // expert's [N, K] only.
  virtual std::vector<float> read(const ParamSpec& spec, int64_t expert = -1) const = 0;

  // The parameter named `name`; throws k3::Error when the inventory has none.
  const ParamSpec& spec(const std::string& name) const;
};

// make-tiny's master, in memory.
class MasterSource final : public FloatSource {
 public:
  explicit MasterSource(const MasterWeights& master) : master_(master) {}
  const K3Config& config() const override { return master_.config; }
  const std::vector<ParamSpec>& params() const override { return master_.params; }
  std::vector<float> read(const ParamSpec& spec, int64_t expert = -1) const override;

 private:
  const MasterWeights& master_;
};

// A config and its parameter inventory; what a read gives is the subclass's.
class InventorySource : public FloatSource {
 public:
  explicit InventorySource(K3Config config);
  const K3Config& config() const override { return config_; }
  const std::vector<ParamSpec>& params() const override { return params_; }

 private:
  K3Config config_;
  std::vector<ParamSpec> params_;
};

// A model's shapes without values: what a header-only checkpoint is laid out from
// (write_family_headers). read() throws: nothing may ask for a value.
class ShapeOnlySource final : public InventorySource {
 public:
  using InventorySource::InventorySource;
  std::vector<float> read(const ParamSpec& spec, int64_t expert = -1) const override;
};

// Values drawn from a seed as they are read (seeded_values in master.h): a float model of any size
// without memory for it, for checkpoints written at real shapes (`k3 bench --family`). The routers
// route as `routing` says (model/routing_skew.h): their matrices are seeded_router_values, their
// correction biases zero (uniform) or skewed_correction_bias's fit, expert 0 the hottest — the
// generated weights' routing. Throws k3::Error for a skew the config cannot take (check_routing_skew).
class SeededSource final : public InventorySource {
 public:
  SeededSource(K3Config config, uint64_t seed, const RoutingSkew& routing = {});
  std::vector<float> read(const ParamSpec& spec, int64_t expert = -1) const override;

 private:
  uint64_t seed_;
  std::vector<float> correction_bias_;  // [E]: every MoE layer's
};

// A dense float checkpoint directory (the bf16 family: BF16/F16/F32 safetensors, sharded or not,
// with config.json), read through its load plan; each tensor's mapped pages are given back once it
// is read. Opening throws k3::Error (one line) for a directory of another family (already quantized,
// GGUF), without config.json, or whose plan has problems (a missing tensor, a shape the config
// does not imply): the first problem and how many more there are.
class CheckpointSource final : public FloatSource {
 public:
  explicit CheckpointSource(const std::string& dir);
  ~CheckpointSource() override;

  const K3Config& config() const override { return *ckpt_.config; }
  const std::vector<ParamSpec>& params() const override { return plan_.params; }
  std::vector<float> read(const ParamSpec& spec, int64_t expert = -1) const override;

  const CheckpointDir& checkpoint() const { return ckpt_; }
  const LoadPlan& plan() const { return plan_; }
  // Bytes of the checkpoint's tensors (what the plan binds).
  uint64_t stored_bytes() const;

 private:
  CheckpointDir ckpt_;
  LoadPlan plan_;
  std::unique_ptr<PlanFiles> files_;
};

}  // namespace k3
