// In-process ranks (parallel/thread_world.h): every collective against its serial definition at
// world sizes 1–8 (sums bit for bit in rank order), size mismatches, and failures that end every
// rank with an error instead of a hang: a rank that throws, a rank that stops calling.
#include "parallel/thread_world.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <random>

#include "core/error.h"

namespace k3 {
namespace {

std::vector<float> values_of(int rank, size_t n, uint64_t salt) {
  std::mt19937_64 rng(salt * 1000 + static_cast<uint64_t>(rank));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

template <class T>
std::span<const std::byte> bytes_of(const std::vector<T>& v) {
  return std::as_bytes(std::span(v));
}
template <class T>
std::span<std::byte> writable_bytes(std::vector<T>& v) {
  return std::as_writable_bytes(std::span(v));
}

class Collectives : public ::testing::TestWithParam<int> {};

TEST_P(Collectives, MatchTheirSerialDefinitions) {
  const int n = GetParam();
  constexpr size_t kCount = 37;
  // Serial results.
  std::vector<float> sum(kCount, 0.0f), max(kCount, -1e30f);
  for (int r = 0; r < n; ++r) {
    const std::vector<float> v = values_of(r, kCount, 1);
    for (size_t i = 0; i < kCount; ++i) sum[i] += v[i], max[i] = std::max(max[i], v[i]);
  }
  ThreadWorld world(n);
  world.run([&](Communicator& c) {
    const int r = c.rank();
    ASSERT_EQ(c.size(), n);
    std::vector<float> a = values_of(r, kCount, 1), m = values_of(r, kCount, 1);
    c.all_reduce(a, ReduceOp::kSum);
    c.all_reduce(m, ReduceOp::kMax);
    EXPECT_EQ(std::memcmp(a.data(), sum.data(), sizeof(float) * kCount), 0) << "rank " << r;
    EXPECT_EQ(m, max) << "rank " << r;

    // reduce_scatter: blocks of 5 values per rank.
    std::vector<float> send(5 * static_cast<size_t>(n)), got(5);
    for (size_t i = 0; i < send.size(); ++i) send[i] = static_cast<float>(r * 100 + static_cast<int>(i));
    c.reduce_scatter(send, got, ReduceOp::kSum);
    for (size_t i = 0; i < 5; ++i) {
      float want = 0;
      for (int q = 0; q < n; ++q) want += static_cast<float>(q * 100 + r * 5 + static_cast<int>(i));
      EXPECT_EQ(got[i], want) << "rank " << r;
    }

    // all_gather of 3 ints per rank.
    std::vector<int32_t> mine = {r, r * 2, r * 3}, all(3 * static_cast<size_t>(n));
    c.all_gather(bytes_of(mine), writable_bytes(all));
    for (int q = 0; q < n; ++q) {
      EXPECT_EQ(all[static_cast<size_t>(3 * q + 2)], q * 3) << "rank " << r;
    }

    // all_to_all_v: rank r sends (r + q) % 3 values "r*1000 + q*10 + k" to rank q.
    std::vector<size_t> send_counts, recv_counts;
    std::vector<int32_t> out;
    for (int q = 0; q < n; ++q) {
      const int k = (r + q) % 3;
      send_counts.push_back(static_cast<size_t>(k) * sizeof(int32_t));
      recv_counts.push_back(static_cast<size_t>((q + r) % 3) * sizeof(int32_t));
      for (int i = 0; i < k; ++i) out.push_back(r * 1000 + q * 10 + i);
    }
    std::vector<int32_t> in(std::accumulate(recv_counts.begin(), recv_counts.end(), size_t{0}) / sizeof(int32_t));
    c.all_to_all_v(bytes_of(out), send_counts, writable_bytes(in), recv_counts);
    std::vector<int32_t> want;
    for (int q = 0; q < n; ++q)
      for (int i = 0; i < (q + r) % 3; ++i) want.push_back(q * 1000 + r * 10 + i);
    EXPECT_EQ(in, want) << "rank " << r;

    // broadcast from the last rank.
    std::vector<int32_t> b = {r, -r};
    c.broadcast(writable_bytes(b), n - 1);
    EXPECT_EQ(b, (std::vector<int32_t>{n - 1, 1 - n})) << "rank " << r;
    c.barrier();
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
  EXPECT_NE(what.find("has 16 bytes"), std::string::npos) << what;
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
