// Every collective of a Communicator against its serial definition, for any world (in-process
// ranks in the gtest suite, MPI processes in the mpirun driver): returns what differed, empty when
// all matched. Sums must equal the rank-order serial sums bit for bit. Also the column gather that
// tensor parallelism builds on them (gather_column_groups).
#pragma once

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/sharding.h"

namespace k3::test {

inline std::vector<float> rank_values(int rank, size_t n, uint64_t salt) {
  std::mt19937_64 rng(salt * 1000 + static_cast<uint64_t>(rank));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

inline std::vector<std::string> collective_failures(Communicator& c) {
  std::vector<std::string> failures;
  const int n = c.size(), r = c.rank();
  const auto check = [&](bool ok, const std::string& what) {
    if (!ok) failures.push_back("rank " + std::to_string(r) + ": " + what);
  };
  constexpr size_t kCount = 37;
  std::vector<float> sum(kCount, 0.0f), max(kCount, -1e30f);
  for (int q = 0; q < n; ++q) {
    const std::vector<float> v = rank_values(q, kCount, 1);
    for (size_t i = 0; i < kCount; ++i) sum[i] += v[i], max[i] = std::max(max[i], v[i]);
  }
  std::vector<float> a = rank_values(r, kCount, 1), m = a;
  c.all_reduce(a, ReduceOp::kSum);
  c.all_reduce(m, ReduceOp::kMax);
  check(std::memcmp(a.data(), sum.data(), sizeof(float) * kCount) == 0, "all_reduce sum");
  check(m == max, "all_reduce max");

  // reduce_scatter: blocks of 5 values per rank.
  std::vector<float> send(5 * static_cast<size_t>(n)), got(5);
  for (size_t i = 0; i < send.size(); ++i) send[i] = static_cast<float>(r * 100 + static_cast<int>(i));
  c.reduce_scatter(send, got, ReduceOp::kSum);
  for (size_t i = 0; i < 5; ++i) {
    float want = 0;
    for (int q = 0; q < n; ++q) want += static_cast<float>(q * 100 + r * 5 + static_cast<int>(i));
    check(got[i] == want, "reduce_scatter value " + std::to_string(i));
  }

  // all_gather of 3 ints per rank.
  std::vector<int32_t> mine = {r, r * 2, r * 3}, all(3 * static_cast<size_t>(n));
  c.all_gather(std::as_bytes(std::span(mine)), std::as_writable_bytes(std::span(all)));
  for (int q = 0; q < n; ++q) check(all[static_cast<size_t>(3 * q + 2)] == q * 3, "all_gather block " + std::to_string(q));

  // all_to_all_v: rank r sends (r + q) % 3 values r*1000 + q*10 + k to rank q.
  std::vector<size_t> send_counts, recv_counts;
  std::vector<int32_t> out, want;
  for (int q = 0; q < n; ++q) {
    send_counts.push_back(static_cast<size_t>((r + q) % 3) * sizeof(int32_t));
    recv_counts.push_back(static_cast<size_t>((q + r) % 3) * sizeof(int32_t));
    for (int k = 0; k < (r + q) % 3; ++k) out.push_back(r * 1000 + q * 10 + k);
    for (int k = 0; k < (q + r) % 3; ++k) want.push_back(q * 1000 + r * 10 + k);
  }
  std::vector<int32_t> in(want.size());
  c.all_to_all_v(std::as_bytes(std::span(out)), send_counts, std::as_writable_bytes(std::span(in)), recv_counts);
  check(in == want, "all_to_all_v");

  // gather_column_groups: 2 rows of 2n + 1 groups of 3 two-byte values (rank 0 one group more), each
  // rank holding its groups' columns of the matrix whose element (row, col) is row · 512 + col.
  const int64_t groups = 2 * n + 1, unit = 3, cols = groups * unit;
  const IndexRange own = split_range(groups, n, r);
  std::vector<uint16_t> local, whole(static_cast<size_t>(2 * cols));
  for (int64_t row = 0; row < 2; ++row) {
    for (int64_t col = own.first * unit; col < own.end() * unit; ++col) local.push_back(static_cast<uint16_t>(row * 512 + col));
  }
  gather_column_groups(c, reinterpret_cast<const std::byte*>(local.data()), 2, own.count * unit, cols, unit, sizeof(uint16_t),
                       reinterpret_cast<std::byte*>(whole.data()));
  for (int64_t i = 0; i < 2 * cols; ++i) {
    check(whole[static_cast<size_t>(i)] == static_cast<uint16_t>(i / cols * 512 + i % cols), "gather_column_groups element " + std::to_string(i));
  }

  // broadcast from the last rank.
  std::vector<int32_t> b = {r, -r};
  c.broadcast(std::as_writable_bytes(std::span(b)), n - 1);
  check(b == std::vector<int32_t>{n - 1, 1 - n}, "broadcast");
  c.barrier();
  return failures;
}

}  // namespace k3::test
