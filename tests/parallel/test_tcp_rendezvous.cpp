// The TCP rendezvous that starts ranks without mpirun (parallel/tcp_rendezvous.h), on loopback with
// one thread per rank: the start values reach every rank; a missing rank, a world-size mismatch, a
// silent rank 0 and a peer that dies end every rank with a one-line error within the timeout; a
// connection that is not a k3 rank is dropped; the model's collectives are refused.
#include "parallel/tcp_rendezvous.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <optional>
#include <thread>

#include "core/error.h"

namespace k3 {
namespace {

using std::chrono::milliseconds;

// A loopback port nothing listens on now (the kernel's choice for port 0).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

// Runs `body(rank)` on one thread per rank; returns each rank's k3::Error message ("" when none).
std::vector<std::string> run_ranks(const std::vector<std::function<void()>>& bodies) {
  std::vector<std::string> errors(bodies.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < bodies.size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        bodies[r]();
      } catch (const Error& e) {
        errors[r] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return errors;
}

TEST(TcpRendezvous, EveryRankGetsTheStartValues) {
  const int port = free_port(), size = 4;
  std::vector<std::function<void()>> bodies;
  for (int r = 0; r < size; ++r) {
    bodies.push_back([=] {
      // Rank 0 comes last: the others retry until it listens.
      if (r == 0) std::this_thread::sleep_for(milliseconds(200));
      TcpRendezvous rv("127.0.0.1", port, r, size, milliseconds(10000));
      EXPECT_EQ(rv.rank(), r);
      EXPECT_EQ(rv.size(), size);
      // Values of different lengths, in rank order on every rank.
      std::vector<std::byte> mine(static_cast<size_t>(r) * 3 + 1, std::byte(r));
      const auto all = rv.exchange(mine);
      ASSERT_EQ(all.size(), static_cast<size_t>(size));
      for (int q = 0; q < size; ++q) EXPECT_EQ(all[q], std::vector<std::byte>(static_cast<size_t>(q) * 3 + 1, std::byte(q)));
      // An id from rank 2, as NcclWorld broadcasts its unique id.
      std::array<std::byte, 128> id{};
      if (r == 2) id.fill(std::byte{0x5a});
      rv.broadcast(id, 2);
      for (std::byte b : id) EXPECT_EQ(b, std::byte{0x5a});
      std::vector<int32_t> gathered(static_cast<size_t>(size));
      const int32_t value = 100 + r;
      rv.all_gather(std::as_bytes(std::span(&value, 1)), std::as_writable_bytes(std::span(gathered)));
      for (int q = 0; q < size; ++q) EXPECT_EQ(gathered[q], 100 + q);
      rv.barrier();
    });
  }
  for (const std::string& e : run_ranks(bodies)) EXPECT_EQ(e, "");
}

TEST(TcpRendezvous, AWorldOfOneNeedsNoPeers) {
  TcpRendezvous rv("127.0.0.1", free_port(), 0, 1, milliseconds(100));
  std::array<std::byte, 4> id{std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}};
  rv.broadcast(id, 0);
  EXPECT_EQ(id[3], std::byte{4});
}

TEST(TcpRendezvous, AMissingRankEndsEveryRankWithinTheTimeout) {
  const int port = free_port();
  const auto started = std::chrono::steady_clock::now();
  const std::vector<std::string> errors = run_ranks({
      [=] { TcpRendezvous rv("127.0.0.1", port, 0, 3, milliseconds(800)); },
      [=] { TcpRendezvous rv("127.0.0.1", port, 1, 3, milliseconds(5000)); },
  });
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(4));
  EXPECT_EQ(errors[0], "rendezvous at 127.0.0.1:" + std::to_string(port) + ", rank 0 of 3: rank(s) 2 did not join within 0.800000 s");
  EXPECT_NE(errors[1].find("rank 1 of 3: rank 0 refused the start: rank(s) 2 did not join"), std::string::npos) << errors[1];
}

TEST(TcpRendezvous, AWorldSizeMismatchIsReportedOnEveryRank) {
  const int port = free_port();
  const std::vector<std::string> errors = run_ranks({
      [=] { TcpRendezvous rv("127.0.0.1", port, 0, 2, milliseconds(5000)); },
      [=] { TcpRendezvous rv("127.0.0.1", port, 1, 3, milliseconds(5000)); },
  });
  EXPECT_NE(errors[0].find("a rank started with a world of 3 ranks, rank 0 with 2"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("rank 0 refused the start: a rank started with a world of 3 ranks"), std::string::npos) << errors[1];
}

TEST(TcpRendezvous, TwoRanksOfTheSameNumberAreRefused) {
  const int port = free_port();
  const std::vector<std::string> errors = run_ranks({
      [=] { TcpRendezvous rv("127.0.0.1", port, 0, 3, milliseconds(5000)); },
      [=] { TcpRendezvous rv("127.0.0.1", port, 1, 3, milliseconds(5000)); },
      [=] {
        std::this_thread::sleep_for(milliseconds(300));
        TcpRendezvous rv("127.0.0.1", port, 1, 3, milliseconds(5000));
      },
  });
  EXPECT_NE(errors[0].find("two ranks joined as rank 1"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("refused the start"), std::string::npos) << errors[1];
  EXPECT_NE(errors[2].find("refused the start"), std::string::npos) << errors[2];
}

TEST(TcpRendezvous, AConnectionThatIsNotARankIsDropped) {
  const int port = free_port();
  const std::vector<std::string> errors = run_ranks({
      [=] { TcpRendezvous rv("127.0.0.1", port, 0, 2, milliseconds(10000)); },
      [=] {
        // A stranger sends bytes that are not a hello, then the real rank 1 joins.
        std::this_thread::sleep_for(milliseconds(200));
        const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons(static_cast<uint16_t>(port));
        ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
        const char junk[] = "GET / HTTP/1.1\r\n\r\n";
        ASSERT_GT(::send(fd, junk, sizeof junk, MSG_NOSIGNAL), 0);
        std::this_thread::sleep_for(milliseconds(100));
        ::close(fd);
        TcpRendezvous rv("127.0.0.1", port, 1, 2, milliseconds(10000));
        rv.barrier();
      },
  });
  // Rank 0 returned from its constructor; its barrier is not called, so rank 1's sees it close.
  EXPECT_EQ(errors[0], "");
  EXPECT_NE(errors[1].find("rank 1 of 2: rank 0: "), std::string::npos) << errors[1];
}

TEST(TcpRendezvous, NoRankZeroIsAnErrorWithinTheTimeout) {
  const int port = free_port();
  try {
    TcpRendezvous rv("127.0.0.1", port, 1, 2, milliseconds(300));
    FAIL() << "joined nobody";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 of 2: rank 0 did not answer within 0.300000 s (Connection refused)"),
              std::string::npos)
        << e.what();
  }
}

TEST(TcpRendezvous, APeerThatDiesEndsTheOthersExchange) {
  const int port = free_port();
  const std::vector<std::string> errors = run_ranks({
      [=] {
        TcpRendezvous rv("127.0.0.1", port, 0, 3, milliseconds(5000));
        rv.barrier();
      },
      [=] {
        TcpRendezvous rv("127.0.0.1", port, 1, 3, milliseconds(5000));
        rv.abort("this rank failed");  // closes its connection, as a dead process's would be
      },
      [=] {
        TcpRendezvous rv("127.0.0.1", port, 2, 3, milliseconds(5000));
        rv.barrier();
      },
  });
  EXPECT_NE(errors[0].find("rank 0 of 3: rank 1: closed the connection"), std::string::npos) << errors[0];
  // Rank 0 closed its connections when it failed (closed or reset, as the kernel reports it).
  EXPECT_NE(errors[2].find("rank 2 of 3: rank 0: "), std::string::npos) << errors[2];
}

TEST(TcpRendezvous, RefusesTheModelsCollectivesAndBadArguments) {
  TcpRendezvous rv("127.0.0.1", free_port(), 0, 1, milliseconds(100));
  std::vector<float> x(4);
  EXPECT_THROW(rv.all_reduce(x, ReduceOp::kSum), Error);
  try {
    TcpRendezvous bad("127.0.0.1", 70000, 0, 2, milliseconds(100));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "field '--master-port': port 70000 is not in 1..65535");
  }
  EXPECT_THROW(TcpRendezvous("127.0.0.1", 29500, 2, 2, milliseconds(100)), Error);
}

}  // namespace
}  // namespace k3
