// Options shared by the commands that run a model (k3 logits, k3 generate): --model, --ids,
// --threads, and the token-id list parser.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/engine.h"

namespace k3::cli {

struct ModelArgs {
  std::string model;
  std::string ids;
  int threads = 0;  // 0 = all cores
};

void add_model_args(CLI::App* cmd, ModelArgs& args);

// "1,2,3" → {1, 2, 3}; every entry must be a decimal integer in [0, vocab). Throws k3::Error
// (field '--ids') naming the offending entry.
std::vector<int64_t> parse_token_ids(const std::string& text, int64_t vocab);

// Reads only the model's config to validate the ids, then binds the weights.
struct LoadedModel {
  std::unique_ptr<Engine> engine;
  std::vector<int64_t> ids;
};
LoadedModel load_model(const ModelArgs& args);

}  // namespace k3::cli
