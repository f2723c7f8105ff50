// Fuzzes the JSON layer and every config parser on top of it (config.json, generation_config.json,
// hf_quant_config.json, inline quantization_config, quant_model_description.json): any input must
// either parse or throw k3::Error; a parsed config must be internally consistent.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "core/error.h"
#include "io/json.h"
#include "model/config.h"
#include "quant/quant_config.h"

namespace {

template <class Fn>
void expect_value_or_k3_error(Fn&& fn) {
  try {
    fn();
  } catch (const k3::Error&) {
  }
}

void check_model_config(const k3::K3Config& c) {
  const auto layers = static_cast<size_t>(c.num_layers);
  if (c.mixer.size() != layers || c.ffn.size() != layers) __builtin_trap();
  if (c.moe && c.moe->experts_per_token > c.moe->num_experts) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  std::optional<k3::JsonNode> root;
  try {
    root = k3::parse_json(text, "fuzz.json");
  } catch (const k3::Error&) {
    return 0;
  }
  expect_value_or_k3_error([&] { check_model_config(k3::parse_k3_config(*root)); });
  expect_value_or_k3_error([&] { k3::parse_generation_config(*root); });
  expect_value_or_k3_error([&] { k3::parse_inline_quant_config(*root); });
  expect_value_or_k3_error([&] { k3::parse_quantization_config(*root); });
  expect_value_or_k3_error([&] { k3::parse_modelopt_hf_quant_config(*root); });
  expect_value_or_k3_error([&] { k3::parse_modelslim_description(*root); });
  return 0;
}
