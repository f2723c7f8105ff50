// Skewed routing for synthetic weights (model/routing_skew.h): the flag's forms and errors, the Zipf
// target shares, and the fitted correction bias reproducing them on fresh simulated tokens.
#include "model/routing_skew.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "core/error.h"

namespace k3 {
namespace {

TEST(RoutingSkew, ParsesUniformAndZipf) {
  EXPECT_EQ(parse_routing_skew("uniform").zipf, 0);
  EXPECT_EQ(parse_routing_skew("zipf:1.2").zipf, 1.2);
  EXPECT_EQ(parse_routing_skew("zipf:1.2").text(), "zipf:1.2");
  EXPECT_EQ(parse_routing_skew("uniform").text(), "uniform");
  for (const char* bad : {"", "zipf", "zipf:", "zipf:0", "zipf:-1", "zipf:5", "zipf:1x", "zipf:nan", "normal", "Uniform"}) {
    try {
      parse_routing_skew(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("field '--routing'"), std::string::npos) << e.what();
    }
  }
}

TEST(RoutingSkew, TargetSharesFollowZipfAndSumToTopK) {
  const std::vector<double> uniform = target_pick_shares(64, 4, {});
  for (const double s : uniform) EXPECT_DOUBLE_EQ(s, 4.0 / 64);
  for (const double zipf : {0.5, 1.0, 2.0, 4.0}) {
    const std::vector<double> shares = target_pick_shares(64, 8, {zipf});
    EXPECT_NEAR(std::accumulate(shares.begin(), shares.end(), 0.0), 8.0, 1e-9) << zipf;
    for (size_t e = 0; e < shares.size(); ++e) {
      EXPECT_LE(shares[e], 1.0) << zipf;
      if (e > 0) {
        EXPECT_LE(shares[e], shares[e - 1]) << zipf;
      }
    }
    // Where no share is capped, the ratio of two shares is Zipf's.
    if (shares[0] < 1.0) {
      EXPECT_NEAR(shares[1] / shares[3], std::pow(2.0, zipf), 1e-9) << zipf;
    }
  }
  EXPECT_EQ(target_pick_shares(64, 8, {4.0})[0], 1.0);  // the hottest expert is in every token's picks
}

TEST(RoutingSkew, TheFittedBiasGivesTheTargetSharesOnFreshTokens) {
  EXPECT_EQ(skewed_correction_bias(64, 4, {}, 1), std::vector<float>(64, 0.0f));
  for (const double zipf : {0.8, 1.5}) {
    const std::vector<float> bias = skewed_correction_bias(64, 4, {zipf}, 1);
    const std::vector<double> want = target_pick_shares(64, 4, {zipf});
    const std::vector<double> got = simulated_pick_shares(bias, 4, 8192, 99);
    for (size_t e = 0; e < want.size(); ++e) EXPECT_NEAR(got[e], want[e], 0.02) << "zipf " << zipf << ", expert " << e;
  }
}

TEST(RoutingSkew, DistinctExpertsOfABatch) {
  const std::vector<double> uniform = target_pick_shares(256, 8, {});
  EXPECT_NEAR(distinct_experts_per_step(uniform, 1), 8.0, 1e-9);
  EXPECT_NEAR(distinct_experts_per_step(uniform, 64), 256.0 * (1.0 - std::pow(1.0 - 8.0 / 256, 64)), 1e-9);
  // A skew concentrates a batch's picks on fewer experts.
  EXPECT_LT(distinct_experts_per_step(target_pick_shares(256, 8, {1.2}), 64), distinct_experts_per_step(uniform, 64));
}

}  // namespace
}  // namespace k3
