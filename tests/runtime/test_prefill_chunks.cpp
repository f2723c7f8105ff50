#include "runtime/prefill_chunks.h"

#include <gtest/gtest.h>

#include <vector>

#include "error_of.h"

namespace k3 {
namespace {

std::vector<int64_t> ends(int64_t done, int64_t total, int64_t budget) {
  std::vector<int64_t> out;
  while (done < total) out.push_back(done = next_prefill_end(done, total, budget));
  return out;
}

TEST(PrefillChunks, AlignedPiecesNeverLeaveOneToken) {
  EXPECT_EQ(ends(0, 10, 256), (std::vector<int64_t>{10}));
  EXPECT_EQ(ends(0, 600, 256), (std::vector<int64_t>{256, 512, 600}));
  EXPECT_EQ(ends(0, 257, 256), (std::vector<int64_t>{192, 257}));     // not 256 then one token
  EXPECT_EQ(ends(0, 65, 64), (std::vector<int64_t>{65}));             // no room to move back: one over
  EXPECT_EQ(ends(0, 300, 100), (std::vector<int64_t>{64, 128, 192, 256, 300}));
  EXPECT_EQ(ends(128, 400, 1000), (std::vector<int64_t>{400}));       // resuming at a block boundary
  for (int64_t total = 2; total < 300; ++total) {
    for (int64_t budget : {64, 100, 128, 256}) {
      int64_t done = 0;
      while (done < total) {
        const int64_t end = next_prefill_end(done, total, budget);
        EXPECT_EQ(done % kPrefillAlign, 0);
        EXPECT_GE(end - done, 2) << total << " " << budget;
        EXPECT_LE(end - done, budget + 1);
        done = end;
      }
    }
  }
}

TEST(PrefillChunks, SmallBudgetsCutPlainly) {
  EXPECT_EQ(ends(0, 10, 3), (std::vector<int64_t>{3, 6, 9, 10}));
  EXPECT_EQ(test::error_of([] { next_prefill_end(5, 5, 64); }),
            "next_prefill_end: needs 0 ≤ done < total and budget ≥ 1 (done 5, total 5, budget 64)");
}

}  // namespace
}  // namespace k3
