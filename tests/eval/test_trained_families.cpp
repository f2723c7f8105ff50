// Every checkpoint family, made by `k3 quantize` from the trained tiny Kimi-K3 in models/tiny-k3,
// passes `k3 check`, loads, and reaches its CPU row of docs/quality.md. The table is measured on
// the first 100 held-out examples of each task; this test scores the first kExamplesPerTask of them
// (the same examples: make_examples draws a prefix) and accepts a total accuracy within the
// sampling noise of that subset, 3 binomial standard deviations (finite population corrected).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "tools/cli_runner.h"

namespace k3 {
namespace {

const std::string kModel = std::string(K3_SOURCE_DIR) + "/models/tiny-k3";
const std::string kQualityDoc = std::string(K3_SOURCE_DIR) + "/docs/quality.md";
constexpr int kExamplesPerTask = 25;
constexpr int kTableExamplesPerTask = 100;
constexpr int kTasks = 4;

struct Row {
  std::string label;   // as docs/quality.md writes it: "gguf q4_k_m"
  std::string family;  // k3 quantize --family
  std::string recipe;  // k3 quantize --recipe, or ""
};

// The CPU row of docs/quality.md whose first cell is `label`: its total accuracy (0–1).
std::optional<double> documented_total(const std::string& label) {
  std::ifstream doc(kQualityDoc);
  std::string line;
  while (std::getline(doc, line)) {
    std::vector<std::string> cells;
    std::stringstream in(line);
    for (std::string cell; std::getline(in, cell, '|');) {
      const size_t a = cell.find_first_not_of(' '), b = cell.find_last_not_of(' ');
      cells.push_back(a == std::string::npos ? "" : cell.substr(a, b - a + 1));
    }
    // "| family | device | add | sort | copy | recall | total | ..." → cells[0] is before the first '|'.
    if (cells.size() >= 8 && cells[1] == label && cells[2] == "cpu") return std::stod(cells[7]) / 100.0;
  }
  return std::nullopt;
}

void PrintTo(const Row& row, std::ostream* os) { *os << row.label; }

class TrainedModelFamilies : public ::testing::TestWithParam<Row> {};

TEST_P(TrainedModelFamilies, QuantizedFromTheTrainedModelReachItsQualityRow) {
  const Row& row = GetParam();
  ASSERT_TRUE(std::filesystem::exists(kModel + "/config.json")) << kModel;
  const std::optional<double> table = documented_total(row.label);
  ASSERT_TRUE(table.has_value()) << "no cpu row '" << row.label << "' in " << kQualityDoc;

  std::string dir = kModel;
  if (row.family != "bf16") {
    dir = ::testing::TempDir() + "/k3_trained_" + row.family + (row.recipe.empty() ? "" : "_" + row.recipe);
    std::filesystem::remove_all(dir);
    const test::CliResult q = test::run_k3("quantize --from " + kModel + " --family " + row.family +
                                           (row.recipe.empty() ? "" : " --recipe " + row.recipe) + " --out " + dir);
    ASSERT_EQ(q.code, 0) << q.err;
  }
  const test::CliResult check = test::run_k3("check " + dir);
  ASSERT_EQ(check.code, 0) << check.err;

  const test::CliResult eval = test::run_k3("eval --model " + dir + " --activations checkpoint --n " +
                                            std::to_string(kExamplesPerTask) + " --threads 2 --json");
  ASSERT_EQ(eval.code, 0) << eval.err;
  const nlohmann::json report = nlohmann::json::parse(eval.out);
  const double total = report["total"]["accuracy"].get<double>();

  const double n = kTasks * kExamplesPerTask, population = kTasks * kTableExamplesPerTask;
  const double noise = 3 * std::sqrt(*table * (1 - *table) / n * (1 - n / population));
  std::printf("[ %s ] total accuracy %.3f on %d examples per task; docs/quality.md %.3f ± %.3f\n", row.label.c_str(), total,
              kExamplesPerTask, *table, noise);
  EXPECT_NEAR(total, *table, noise + 1e-9) << row.label;
}

// The rows of scripts/quality_table.sh.
const Row kRows[] = {
    {"bf16", "bf16", ""},
    {"modelopt-mixed", "modelopt-mixed", ""},
    {"modelopt-nvfp4", "modelopt-nvfp4", ""},
    {"modelopt-fp8", "modelopt-fp8", ""},
    {"compressed-tensors-mxfp4", "compressed-tensors-mxfp4", ""},
    {"fp8-block", "fp8-block", ""},
    {"modelslim-w4a8", "modelslim-w4a8", ""},
    {"gguf q4_k_m", "gguf", "q4_k_m"},
    {"gguf q2_k_experts", "gguf", "q2_k_experts"},
    {"gguf-expert-pack q2_k_experts", "gguf-expert-pack", "q2_k_experts"},
};

INSTANTIATE_TEST_SUITE_P(QualityTable, TrainedModelFamilies, ::testing::ValuesIn(kRows), [](const auto& info) {
  std::string name = info.param.label;
  for (char& ch : name) {
    if (ch == '-' || ch == ' ') ch = '_';
  }
  return name;
});

}  // namespace
}  // namespace k3
