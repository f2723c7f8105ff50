// Helpers of the compressed-tensors and FP8-block family tests: rewriting a checkpoint into one
// file with tensors changed, dropped or added (and config.json edited), and comparing a plan's
// materialised parameters with values computed from the master.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/numeric.h"
#include "family_test_util.h"
#include "io/safetensors.h"

namespace k3::test {

struct StoredTensor {
  std::string name;
  Dtype dtype;
  std::vector<uint64_t> shape;
  std::vector<uint8_t> bytes;
};
using Tensors = std::vector<StoredTensor>;

inline StoredTensor& tensor_named(Tensors& tensors, const std::string& name) {
  for (auto& t : tensors) {
    if (t.name == name) return t;
  }
  throw std::runtime_error("test checkpoint has no tensor " + name);
}

inline void drop_tensor(Tensors& tensors, const std::string& name) {
  std::erase_if(tensors, [&](const StoredTensor& t) { return t.name == name; });
}

inline Json read_config(const std::string& dir) {
  std::ifstream in(dir + "/config.json");
  return Json::parse(in);
}

// Copies src_dir's checkpoint to TempDir()/name as one model.safetensors after `edit_tensors`,
// with config.json after `edit_config`. Returns the new directory.
inline std::string rewrite_checkpoint(const std::string& src_dir, const std::string& name,
                                      const std::function<void(Tensors&)>& edit_tensors,
                                      const std::function<void(Json&)>& edit_config = {}) {
  const std::string dir = ::testing::TempDir() + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  Json config = read_config(src_dir);
  if (edit_config) edit_config(config);
  std::ofstream(dir + "/config.json") << config.dump(2);
  const auto ckpt = SafetensorsCheckpoint::open(src_dir);
  Tensors tensors;
  for (const auto& e : ckpt.entries()) {
    const auto& info = ckpt.info(e);
    const auto bytes = ckpt.data(e);
    tensors.push_back({info.name, info.dtype, info.shape, std::vector<uint8_t>(bytes.begin(), bytes.end())});
  }
  if (edit_tensors) edit_tensors(tensors);
  SafetensorsWriter w;
  for (auto& t : tensors) w.add(t.name, t.dtype, t.shape, std::move(t.bytes));
  w.write(dir + "/model.safetensors");
  return dir;
}

// The values a parameter must materialise to, or nullopt when the binding must be dense (then the
// master rounded to the stored dtype).
using ExpectedFn = std::function<std::optional<std::vector<float>>(const ParamSpec&, const Binding&)>;

// Materialises every parameter and compares it EXACTLY with `expected` (or, for dense bindings, the
// master in its stored dtype). Quantized parameters must also stay close to the master: relative
// RMS error below `max_rel_rms`, so a scale forgotten or applied twice cannot pass.
inline void expect_every_parameter(const LoadPlan& plan, const MasterWeights& master, const ExpectedFn& expected,
                                   double max_rel_rms) {
  ASSERT_EQ(plan.bindings.size(), plan.params.size());
  PlanFiles files(plan);
  for (size_t i = 0; i < plan.params.size(); ++i) {
    const auto& spec = plan.params[i];
    const auto& b = plan.bindings[i];
    const auto got = materialize(b, spec, files);
    const auto& m = master.at(spec.name);
    ASSERT_EQ(got.size(), m.size()) << spec.name;
    const auto want = expected(spec, b);
    if (!want) {
      ASSERT_EQ(b.scheme.kind, SchemeKind::Dense) << spec.name;
      const bool f32 = b.scheme.storage == "F32";
      for (size_t j = 0; j < m.size(); ++j) {
        ASSERT_EQ(got[j], f32 ? m[j] : decode_bf16(encode_bf16(m[j]))) << spec.name << "[" << j << "]";
      }
      continue;
    }
    ASSERT_EQ(want->size(), m.size()) << spec.name;
    double err = 0, norm = 0;
    for (size_t j = 0; j < m.size(); ++j) {
      ASSERT_EQ(got[j], (*want)[j]) << spec.name << "[" << j << "]";
      err += (got[j] - m[j]) * double(got[j] - m[j]);
      norm += m[j] * double(m[j]);
    }
    EXPECT_LT(std::sqrt(err / norm), max_rel_rms) << spec.name;
  }
}

}  // namespace k3::test
