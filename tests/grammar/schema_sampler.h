// Random JSON values that validate against a schema of the supported subset and stay inside what
// the generated grammar allows (declared properties only unless additionalProperties, plain
// numbers, strings with escapes as nlohmann writes them). For tests.
#pragma once

#include <random>

#include "grammar/json_schema.h"

namespace k3::grammar::test {

OrderedJson sample_value(const OrderedJson& schema, const OrderedJson& root, std::mt19937& rng, int depth = 0);

// A string matching the regex (a random derivation of it).
std::string sample_regex(std::string_view pattern, std::mt19937& rng);

}  // namespace k3::grammar::test
