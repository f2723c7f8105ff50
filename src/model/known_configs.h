// Built-in config.json documents of released models, for runs without a checkpoint
// (`k3 bench --synthetic NAME`). Each parses with parse_k3_config (model/config.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace k3 {

// The config.json text of a known model, or nullopt for an unknown name.
std::optional<std::string> known_config_json(const std::string& name);

// The names known_config_json accepts.
std::vector<std::string> known_config_names();

}  // namespace k3
