// In-process ranks (parallel/thread_world.h): every collective against its serial definition at
// world sizes 1–8 (sums bit for bit in rank order), size mismatches, and failures that end every
// rank with an error instead of a hang: a rank that throws, a rank that stops calling.
#include "parallel/thread_world.h"

#include <gtest/gtest.h>

#include <atomic>

#include "collective_checks.h"
#include "core/error.h"

namespace k3 {
namespace {

class Collectives : public ::testing::TestWithParam<int> {};

TEST_P(Collectives, MatchTheirSerialDefinitions) {
  ThreadWorld world(GetParam());
  world.run([&](Communicator& c) {
    for (const std::string& f : test::collective_failures(c)) ADD_FAILURE() << f;
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, Collectives, ::testing::Values(1, 2, 3, 4, 8));

std::string failure_of(ThreadWorld& world, const std::function<void(Communicator&)>& fn) {
  try {
    world.run(fn);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ThreadWorld, MismatchedSizesFailEveryRank) {
  ThreadWorld world(3);
  std::atomic<int> failed{0};
  const std::string what = failure_of(world, [&](Communicator& c) {
    std::vector<float> v(c.rank() == 1 ? 4 : 5, 1.0f);
    try {
      c.all_reduce(v, ReduceOp::kSum);
    } catch (const Error&) {
      ++failed;
      throw;
    }
  });
  EXPECT_EQ(failed.load(), 3);
  EXPECT_NE(what.find("all_reduce on rank"), std::string::npos) << what;
  // Whichever rank saw the mismatch first names it: rank 1's 16 bytes against another's 20.
  EXPECT_TRUE(what.find("rank 1 has 16 bytes") != std::string::npos || what.find(", rank 1 16") != std::string::npos) << what;
}

TEST(ThreadWorld, ARankThatThrowsEndsTheOthersWithItsError) {
  ThreadWorld world(4);
  std::atomic<int> ended{0};
  const std::string what = failure_of(world, [&](Communicator& c) {
    if (c.rank() == 2) throw Error("expert 7 of layer 3: out of memory");
    std::vector<float> v(8, 1.0f);
    try {
      for (int i = 0; i < 100; ++i) c.all_reduce(v, ReduceOp::kSum);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("rank 2: expert 7 of layer 3: out of memory"), std::string::npos) << e.what();
      ++ended;
      throw;
    }
  });
  EXPECT_EQ(what, "expert 7 of layer 3: out of memory");  // the failing rank's own error
  EXPECT_EQ(ended.load(), 3);
}

TEST(ThreadWorld, ARankThatStopsCallingTimesTheOthersOut) {
  ThreadWorld world(3, std::chrono::milliseconds(200));
  const std::string what = failure_of(world, [&](Communicator& c) {
    if (c.rank() == 0) return;  // leaves without the collective
    c.barrier();
  });
  EXPECT_NE(what.find("waited 200 ms in barrier for the other ranks"), std::string::npos) << what;
  // The world stays failed: later collectives throw at once.
  EXPECT_THROW(world.rank(1).barrier(), Error);
}

TEST(ThreadWorld, BadArguments) {
  EXPECT_THROW(ThreadWorld(0), Error);
  ThreadWorld world(2);
  const std::string what = failure_of(world, [&](Communicator& c) {
    std::vector<std::byte> b(4);
    c.broadcast(b, 5);
  });
  EXPECT_NE(what.find("root 5 is not a rank"), std::string::npos) << what;
}

}  // namespace
}  // namespace k3
