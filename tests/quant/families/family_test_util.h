// Shared steps of the family tests: write a make-tiny checkpoint in a temp dir (in process), plan
// it, and materialise parameters through the plan.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "io/file.h"
#include "model/tiny_config.h"
#include "quant/families/family.h"
#include "quant/plan/materialize.h"

namespace k3::test {

struct TinyCheckpoint {
  std::string dir;
  Json config_doc;
  MasterWeights master;
};

inline TinyCheckpoint make_tiny(FamilyId family, TinyArch arch, uint64_t seed = 7) {
  const std::string dir = ::testing::TempDir() + "/k3_tiny_" + family_name(family) + "_" +
                          (arch == TinyArch::KimiK3 ? "k3" : "linear") + "_" + std::to_string(seed);
  std::filesystem::remove_all(dir);
  Json doc = tiny_config_json(arch, TinySize::Tiny);
  const K3Config config = parse_k3_config(parse_json(doc.dump(), dir + "/config.json"));
  MasterWeights master = make_master(config, seed);
  write_family_checkpoint(family, master, doc, dir);
  return {dir, doc, std::move(master)};
}

// Plans with headers only and checks that no payload was mapped.
inline LoadPlan plan_headers_only(const std::string& dir) {
  const uint64_t maps_before = File::payload_maps();
  LoadPlan plan = plan_checkpoint(dir);
  EXPECT_EQ(File::payload_maps(), maps_before) << "planning mapped tensor payloads";
  return plan;
}

inline std::string problems_text(const LoadPlan& plan) {
  std::string s;
  for (const auto& p : plan.problems) s += p.text() + "\n";
  return s;
}

}  // namespace k3::test
