// make-tiny checkpoints for the eval tests, written once per test process under TempDir().
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "tools/cli_runner.h"

namespace k3::test {

// DIR of `k3 make-tiny --arch ARCH --family FAMILY` (seed 1), made on first use.
inline std::string tiny_model(const std::string& arch, const std::string& family) {
  const std::string dir = ::testing::TempDir() + "/k3_eval_" + arch + "_" + family;
  if (!std::filesystem::exists(dir + "/config.json")) {
    const CliResult r = run_k3("make-tiny --arch " + arch + " --family " + family + " --out " + dir);
    EXPECT_EQ(r.code, 0) << r.err;
  }
  return dir;
}

}  // namespace k3::test
