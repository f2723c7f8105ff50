// Rendering a placement and its decode estimates for people (`k3 check --devices`) and tools
// (`k3 check --devices --json`).
#pragma once

#include <string>
#include <vector>

#include "io/json.h"
#include "parallel/roofline.h"

namespace k3 {

std::string placement_table(const Placement& placement, const std::vector<DecodeEstimate>& decode);
Json placement_json(const Placement& placement, const std::vector<DecodeEstimate>& decode);

}  // namespace k3
