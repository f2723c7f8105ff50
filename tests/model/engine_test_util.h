// Helpers of the engine tests: run the engine over a prompt, compare logit matrices.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <stdexcept>
#include <vector>

#include "quant/families/family_test_util.h"
#include "runtime/engine.h"

namespace k3::test {

// max |a − b| / max |b|, the relative error measure of every logits comparison.
template <typename A, typename B>
double relative_max_error(const std::vector<A>& a, const std::vector<B>& b) {
  EXPECT_EQ(a.size(), b.size());
  double max_abs = 0, max_err = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    max_abs = std::max(max_abs, std::fabs(static_cast<double>(b[i])));
    max_err = std::max(max_err, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
  }
  return max_abs > 0 ? max_err / max_abs : max_err;
}

// Logits of every prompt position from one prefill of a fresh sequence.
inline std::vector<float> prefill_logits(Engine& engine, const std::vector<int64_t>& ids) {
  const int64_t seq = engine.new_sequence();
  std::vector<float> logits = engine.step({{seq, ids, true}}).front().logits;
  engine.free_sequence(seq);
  return logits;
}

// The make-tiny master draws AttnRes projections at 0.5·N(0,1): on the tiny K3 the depth-softmax
// scores are O(10–50), so the mixture switches sharply between candidates and fp32 rounding is
// amplified to ~4e-4 of the largest logit on some tokens (measured; prefill and decode then deviate
// from the float64 reference alike — conditioning, not a path difference). The engine tests scale
// those projections by this factor, which brings fp32-vs-fp64 to ~3e-5 and keeps the tolerances
// tight enough that a state or scale error cannot hide.
inline constexpr float kAttnResProjScale = 0.2f;

// make_tiny (or the `small` size, whose head geometry is the real models' and so the CUDA kernels')
// with the AttnRes projections of the master scaled by kAttnResProjScale, written in `family` (the
// quantizers run on the scaled master as usual).
// `edit` may change the master further before the family is written (its name joins the dir's).
inline TinyCheckpoint make_tiny_conditioned(FamilyId family, TinyArch arch, uint64_t seed,
                                            TinySize size = TinySize::Tiny,
                                            const std::function<void(MasterWeights&)>& edit = {},
                                            const std::string& edit_name = "") {
  const std::string dir = ::testing::TempDir() + "/k3_engine_" + family_name(family) + "_" +
                          (arch == TinyArch::KimiK3 ? "k3" : "linear") + (size == TinySize::Small ? "_small_" : "_") +
                          edit_name + std::to_string(seed);
  std::filesystem::remove_all(dir);
  Json doc = tiny_config_json(arch, size);
  const K3Config config = parse_k3_config(parse_json(doc.dump(), dir + "/config.json"));
  MasterWeights master = make_master(config, seed);
  for (auto& [name, values] : master.values) {
    if (name.find("_res_proj.weight") == std::string::npos) continue;
    for (float& v : values) v *= kAttnResProjScale;
  }
  if (edit) edit(master);
  write_family_checkpoint(family, master, doc, dir);
  return {dir, doc, std::move(master)};
}

// make_tiny_conditioned with the routing pinned: the correction bias (selection only, spec §7.1) of
// the first top-k experts raised far above every score, the routing weights still from the unbiased
// scores. Comparisons across numerics (GPU vs CPU, bf16 vs float inputs) use it: on random weights
// rounding noise flips MoE top-k choices, and one flipped expert moves a token's logits by O(1).
inline TinyCheckpoint make_tiny_pinned_routing(FamilyId family, TinyArch arch, uint64_t seed,
                                               TinySize size = TinySize::Tiny) {
  const K3Config config = parse_k3_config(parse_json(tiny_config_json(arch, size).dump(), "config.json"));
  const size_t top_k = static_cast<size_t>(config.moe->experts_per_token);
  auto pin = [top_k](MasterWeights& master) {
    for (auto& [name, values] : master.values) {
      if (name.find("e_score_correction_bias") == std::string::npos) continue;
      std::fill(values.begin(), values.end(), 0.0f);
      std::fill(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(std::min(top_k, values.size())), 100.0f);
    }
  };
  return make_tiny_conditioned(family, arch, seed, size, pin, "pinned_");
}

// A deterministic prompt of n ids in [0, vocab).
inline std::vector<int64_t> test_prompt(int64_t n, int64_t vocab, int64_t salt = 0) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < n; ++i) ids.push_back((i * 131 + salt * 17 + 7) % vocab);
  return ids;
}

// How far `got`'s logits are from `want`'s on the same checkpoint (relative_max_error): a 40-token
// prompt prefilled at once, and 6 decode steps after a 20-token prefill. Throws std::runtime_error
// when `got` gives a non-finite logit.
struct EngineLogitErrors {
  double prefill = 0, decode = 0;
};
inline EngineLogitErrors compare_engine_logits(Engine& got, Engine& want) {
  const std::vector<int64_t> prompt = test_prompt(40, want.config().vocab_size);
  EngineLogitErrors e;
  e.prefill = relative_max_error(prefill_logits(got, prompt), prefill_logits(want, prompt));
  const std::vector<int64_t> head(prompt.begin(), prompt.begin() + 20);
  const int64_t sg = got.new_sequence(), sw = want.new_sequence();
  got.step({{sg, head, false}});
  want.step({{sw, head, false}});
  for (int i = 0; i < 6; ++i) {
    const int64_t tok = prompt[20 + i];
    const std::vector<float> a = want.step({{sw, {tok}, false}}).front().logits;
    const std::vector<float> b = got.step({{sg, {tok}, false}}).front().logits;
    for (float v : b) {
      if (!std::isfinite(v)) throw std::runtime_error("compare_engine_logits: a non-finite logit");
    }
    e.decode = std::max(e.decode, relative_max_error(b, a));
  }
  got.free_sequence(sg);
  want.free_sequence(sw);
  return e;
}

}  // namespace k3::test
