#include "runtime/calibration.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <mutex>

#include "io/json.h"
#include "runtime/engine.h"
#include "runtime/generate.h"

namespace k3 {
namespace {

// Largest |x| per linear input: one slot per linear, one per expert for a bank (slots of inputs no
// token reached stay 0 or absent; InputAmax::of says what they become).
class AmaxObserver final : public cpu::LinearInputObserver {
 public:
  void observe(const std::string& param, int64_t expert, const float* x, int64_t m, int64_t k) override {
    float local = 0.0f;
    const int64_t n = m * k;
    for (int64_t i = 0; i < n; ++i) local = std::max(local, std::fabs(x[i]));
    if (!std::isfinite(local)) throw Error(Where{"", param, "input"}, "calibration: the float model's input to this linear is not finite");
    std::lock_guard lock(mutex_);
    std::vector<float>& slots = amax_.by_param[param];
    const size_t i = expert < 0 ? 0 : static_cast<size_t>(expert);
    if (i >= slots.size()) slots.resize(i + 1, 0.0f);
    slots[i] = std::max(slots[i], local);
  }

  InputAmax take() {
    std::lock_guard lock(mutex_);
    return std::move(amax_);
  }

 private:
  std::mutex mutex_;
  InputAmax amax_;
};

}  // namespace

std::vector<std::vector<int64_t>> load_calibration_ids(const std::string& path, int64_t vocab) {
  const JsonNode root = load_json_file(path);
  if (!root.is_array()) root.fail("must be a JSON array of token-id arrays, e.g. [[1, 2, 3], [4, 5]]");
  std::vector<std::vector<int64_t>> out;
  for (const JsonNode& seq : root.elements()) {
    if (!seq.is_array()) seq.fail("must be an array of token ids");
    std::vector<int64_t> ids;
    for (const JsonNode& id : seq.elements()) ids.push_back(id.as_int_in(0, vocab - 1));
    if (ids.empty()) seq.fail("is an empty sequence");
    out.push_back(std::move(ids));
  }
  if (out.empty()) root.fail("holds no sequence");
  return out;
}

InputAmax calibrate_input_amax(const std::string& model_dir, const std::vector<std::vector<int64_t>>& sequences, int threads,
                               const CalibrationProgress& progress) {
  size_t longest = 0;
  for (const auto& s : sequences) longest = std::max(longest, s.size());
  auto observer = std::make_shared<AmaxObserver>();
  EngineOptions options;
  options.threads = threads;
  options.max_sequences = 1;
  options.max_context = static_cast<int64_t>(longest);
  options.linear.observer = observer;
  Engine engine(model_dir, options);
  for (size_t i = 0; i < sequences.size(); ++i) {
    const int64_t seq = engine.new_sequence();
    prefill(engine, seq, sequences[i], false);
    engine.free_sequence(seq);
    if (progress) progress(i + 1, sequences.size());
  }
  return observer->take();
}

}  // namespace k3
