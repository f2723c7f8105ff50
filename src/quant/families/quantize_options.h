// What `k3 quantize` (and make-tiny, with the defaults) tells the family writers beyond the source:
// the GGUF type recipe, calibrated activation ranges, and a progress callback.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "model/parameters.h"
#include "quant/families/gguf_recipe.h"

namespace k3 {

// The largest |x| seen at each linear's input while the float model ran over calibration sequences
// (runtime/calibration.h), by parameter name: one value for a linear, one per expert for a bank;
// a value ≤ 0 means no calibration token reached that input.
struct InputAmax {
  std::map<std::string, std::vector<float>> by_param;

  // The amax behind unit `expert` (−1: not a bank) of `spec`, as ModelOpt exports it: the input's
  // own; for an expert no token was routed to, the largest of its bank's calibrated experts
  // (modelopt set_expert_quantizer_amax); nullopt when nothing reached the input (the writer then
  // keeps the recipe's constant).
  std::optional<float> of(const ParamSpec& spec, int64_t expert) const;
};

// One unit written (family_writer.h): its position, label, format and bytes.
struct UnitDone {
  size_t index = 0;  // 1-based
  size_t count = 0;
  const std::string& label;
  const std::string& format;
  uint64_t bytes = 0;
};

struct QuantizeOptions {
  GgufRecipe gguf_recipe = GgufRecipe::kDefault;  // gguf and gguf-expert-pack only
  const InputAmax* input_amax = nullptr;          // null: the recipe's constant input_scale
  std::function<void(const UnitDone&)> progress;  // after each unit (empty: quiet)
  // Units produced at once, each on its own thread (its parallel loops then run on that thread
  // alone); the files are bit for bit what one unit at a time writes. More than 1 only for a source
  // that allows concurrent reads (SeededSource, MasterSource). Units of at least
  // `alone_unit_bytes` (an embedding, lm_head) are produced first, one at a time, with every thread.
  int concurrent_units = 1;
  uint64_t alone_unit_bytes = uint64_t{256} << 20;
  // Who wrote the checkpoint, as the files record it (GGUF general.name "<producer> <arch>", the
  // ModelOpt producer version with '-' for ' ').
  std::string producer = "k3 make-tiny";
};

}  // namespace k3
