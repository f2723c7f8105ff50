// What a model's parameters weigh as stored: the input of placement planning (parallel/placement.h).
// From a LoadPlan (the checkpoint's headers) or from a family writer's layout (a config alone:
// quant/families/family_writer.h layout_footprint).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/parameters.h"
#include "quant/plan/load_plan.h"

namespace k3 {

struct ParamFootprint {
  ParamSpec spec;
  uint64_t bytes = 0;  // stored bytes of every part (codes, scales, per-tensor scalars)
  std::string format;  // scheme name ("BF16", "MXFP4/g32", …) or the writer's format text
};

struct Footprint {
  std::string family;
  bool from_layout = false;  // true: laid out from the config by the family's writer, no headers read
  std::vector<ParamFootprint> params;

  uint64_t total_bytes() const;
};

// Every binding's stored bytes and scheme name, in the plan's parameter order.
Footprint footprint_of(const LoadPlan& plan);

}  // namespace k3
