// Calibration of static activation scales (`k3 quantize --calib`): the float model runs on the CPU
// over calibration sequences while an observer (cpu::LinearInputObserver) records the largest |x|
// at every linear's input — per expert for the routed experts, over the tokens routed to each.
// The family writers turn those into ModelOpt input_scale values (quant/families/quantize_options.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "quant/families/quantize_options.h"

namespace k3 {

// A calibration file: a JSON array of sequences, each a non-empty array of token ids in
// [0, vocab), e.g. [[163584, 1010, 2040], [5, 6, 7, 8]] (what `k3 tokenize --json` prints per text,
// gathered into one array). Throws k3::Error naming the file and the entry ("[2][5]") otherwise.
std::vector<std::vector<int64_t>> load_calibration_ids(const std::string& path, int64_t vocab);

// Called after each sequence with the sequences done and their count.
using CalibrationProgress = std::function<void(size_t done, size_t total)>;

// Runs the (dense float) checkpoint in `model_dir` on the CPU over every sequence (one prefill each,
// chunked like any prompt) and returns each linear's input amax. threads: as EngineOptions (0 = all).
InputAmax calibrate_input_amax(const std::string& model_dir, const std::vector<std::vector<int64_t>>& sequences, int threads = 0,
                               const CalibrationProgress& progress = {});

}  // namespace k3
