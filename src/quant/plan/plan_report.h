// Rendering a LoadPlan for people (`k3 check` table) and for tools (`k3 check --json`).
#pragma once

#include <string>

#include "io/json.h"
#include "quant/plan/load_plan.h"

namespace k3 {

// Per parameter group: parameter count, scheme counts and stored bytes; then every problem.
std::string plan_table(const LoadPlan& plan, const std::string& checkpoint);
Json plan_json(const LoadPlan& plan, const std::string& checkpoint);

}  // namespace k3
