// k3_test_op_parity: one parameterized suite per op, one test per (case, target), named
//   Cpu/<Op>.MatchesReference/<format>__<source>__<shape>__<tier>
// e.g. Cpu/Linear.MatchesReference/GGUF_q4_K__odd__37x512__m37__avx2. Each test compares the target
// with the float64 reference and, for every target after the first, with the first target.
//
// `k3_test_op_parity --list` prints the coverage matrix (ops × weight formats) and exits before
// gtest runs; any other arguments go to gtest (--gtest_filter=Cpu/Linear.*, …).
#include <gtest/gtest.h>

#include <exception>
#include <iostream>
#include <string>

#include "harness.h"

namespace k3::op_parity {
namespace {

struct CaseRef {
  size_t index = 0, target = 0;
};
void PrintTo(const CaseRef& r, std::ostream* os) {
  *os << all_cases().at(r.index).name << " on " << targets().at(r.target).name;
}

std::vector<CaseRef> refs_of(const std::string& op) {
  std::vector<CaseRef> out;
  const auto& cases = all_cases();
  for (size_t i = 0; i < cases.size(); ++i) {
    if (cases[i].op != op) continue;
    for (size_t t = 0; t < targets().size(); ++t) out.push_back({i, t});
  }
  return out;
}

std::string ref_name(const ::testing::TestParamInfo<CaseRef>& info) {
  return all_cases().at(info.param.index).name + "__" + targets().at(info.param.target).name;
}

#define K3_OP_PARITY_SUITE(Suite, op)                                                       \
  class Suite : public ::testing::TestWithParam<CaseRef> {};                                \
  TEST_P(Suite, MatchesReference) { run_case(GetParam().index, GetParam().target); }        \
  INSTANTIATE_TEST_SUITE_P(Cpu, Suite, ::testing::ValuesIn(refs_of(op)), ref_name)

K3_OP_PARITY_SUITE(Linear, "linear");
K3_OP_PARITY_SUITE(RmsNorm, "rms_norm");
K3_OP_PARITY_SUITE(AttnResMixNorm, "attn_res_mix_norm");
K3_OP_PARITY_SUITE(GatedActivation, "gated_activation");
K3_OP_PARITY_SUITE(Route, "route");
K3_OP_PARITY_SUITE(Kda, "kda");
K3_OP_PARITY_SUITE(Mla, "mla");
K3_OP_PARITY_SUITE(Moe, "moe");
K3_OP_PARITY_SUITE(Mlp, "mlp");

}  // namespace
}  // namespace k3::op_parity

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--list") {
    try {
      k3::op_parity::print_coverage(std::cout);
    } catch (const std::exception& e) {
      std::cerr << "op parity: " << e.what() << "\n";
      return 1;
    }
    return 0;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
