#include "parallel/tcp_rendezvous.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <thread>

#include "core/error.h"

namespace k3 {
namespace {

using Clock = std::chrono::steady_clock;

// Wire format, little-endian as the hosts are: a hello of kMagic, the protocol version, the sender's
// rank and world size; rank 0's answer (one status byte, then a message when it refuses); each
// exchange round: every rank sends one value to rank 0, which answers every rank with all of them.
constexpr uint32_t kMagic = 0x5652334b;  // "K3RV"
constexpr uint32_t kVersion = 1;
struct Hello {
  uint32_t magic, version, rank, size;
};

// A deadline, or none (untimed waits).
struct Deadline {
  Clock::time_point at;
  bool untimed = false;
  int poll_ms() const {
    if (untimed) return 1000;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at - Clock::now()).count();
    return left <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left, 1000));
  }
  bool passed() const { return !untimed && Clock::now() >= at; }
};

std::string errno_text() { return std::strerror(errno); }

// Waits until `fd` is readable (or writable); false when the deadline passed first.
bool wait_for(int fd, short events, const Deadline& deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, deadline.poll_ms());
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return true;  // the read or write reports the error
    if (deadline.passed()) return false;
  }
}

// Reads (or writes) exactly `bytes`; returns the problem ("" when done).
std::string transfer(int fd, char* p, size_t bytes, bool write, const Deadline& deadline) {
  while (bytes > 0) {
    if (!wait_for(fd, write ? POLLOUT : POLLIN, deadline)) return "timed out";
    const ssize_t n = write ? ::send(fd, p, bytes, MSG_NOSIGNAL) : ::recv(fd, p, bytes, 0);
    if (n == 0 && !write) return "closed the connection";
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return errno_text();
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return "";
}

std::string read_all(int fd, void* data, size_t bytes, const Deadline& d) { return transfer(fd, static_cast<char*>(data), bytes, false, d); }

std::string write_all(int fd, const void* data, size_t bytes, const Deadline& d) {
  return transfer(fd, const_cast<char*>(static_cast<const char*>(data)), bytes, true, d);
}

// One length-prefixed value.
std::string write_value(int fd, std::span<const std::byte> v, const Deadline& d) {
  const uint64_t n = v.size();
  std::string e = write_all(fd, &n, sizeof n, d);
  return e.empty() ? write_all(fd, v.data(), v.size(), d) : e;
}

std::string read_value(int fd, std::vector<std::byte>& v, const Deadline& d) {
  uint64_t n = 0;
  if (std::string e = read_all(fd, &n, sizeof n, d); !e.empty()) return e;
  if (n > kMaxRendezvousBytes) return "sent a value of " + std::to_string(n) + " bytes (at most " + std::to_string(kMaxRendezvousBytes) + ")";
  v.resize(n);
  return read_all(fd, v.data(), n, d);
}

struct AddressInfo {
  addrinfo* list = nullptr;
  ~AddressInfo() {
    if (list) ::freeaddrinfo(list);
  }
};

}  // namespace

TcpRendezvous::TcpRendezvous(const std::string& address, int port, int rank, int size, std::chrono::milliseconds timeout)
    : where_("rendezvous at " + address + ":" + std::to_string(port) + ", rank " + std::to_string(rank) + " of " + std::to_string(size)),
      timeout_(timeout),
      rank_(rank),
      size_(size) {
  if (size < 1 || rank < 0 || rank >= size) throw Error(Where{"", "", "--node-rank"}, where_ + ": no such rank");
  if (port < 1 || port > 65535) throw Error(Where{"", "", "--master-port"}, "port " + std::to_string(port) + " is not in 1..65535");
  AddressInfo info;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (rank == 0) hints.ai_flags = AI_PASSIVE;
  if (const int e = ::getaddrinfo(address.c_str(), std::to_string(port).c_str(), &hints, &info.list); e != 0) {
    throw Error(Where{"", "", "--master-addr"}, where_ + ": cannot resolve '" + address + "': " + ::gai_strerror(e));
  }
  const Deadline deadline{Clock::now() + timeout, false};
  peers_.assign(static_cast<size_t>(size), -1);
  if (size == 1) return;
  const auto seconds = std::to_string(static_cast<double>(timeout.count()) / 1000.0);
  if (rank == 0) {
    listener_ = ::socket(info.list->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int on = 1;
    ::setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    if (listener_ < 0 || ::bind(listener_, info.list->ai_addr, info.list->ai_addrlen) != 0 || ::listen(listener_, size) != 0) {
      const std::string why = errno_text();
      close_all();
      throw Error(Where{"", "", "--master-port"}, where_ + ": cannot listen: " + why);
    }
    // Every other rank says hello; rank 0 answers all of them once they are in (so a world-size
    // mismatch is reported on every rank that came).
    std::string refused;
    int joined = 1;
    while (joined < size) {
      if (!wait_for(listener_, POLLIN, deadline)) {
        std::string missing;
        for (int q = 1; q < size; ++q) {
          if (peers_[static_cast<size_t>(q)] < 0) missing += (missing.empty() ? "" : ", ") + std::to_string(q);
        }
        refused = "rank(s) " + missing + " did not join within " + seconds + " s";
        break;
      }
      const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      // A connection that is not a k3 rank (a port scanner, another program) gets two seconds to say
      // hello, and is dropped without stopping the wait for the ranks.
      const Deadline hello_deadline{std::min(deadline.at, Clock::now() + std::chrono::seconds(2)), false};
      Hello h{};
      if (!read_all(fd, &h, sizeof h, hello_deadline).empty() || h.magic != kMagic || h.version != kVersion) {
        ::close(fd);
        continue;
      }
      if (h.size != static_cast<uint32_t>(size)) {
        refused = "a rank started with a world of " + std::to_string(h.size) + " ranks, rank 0 with " + std::to_string(size);
      } else if (h.rank == 0 || h.rank >= h.size) {
        refused = "a rank joined as rank " + std::to_string(h.rank) + ", not in 1.." + std::to_string(size - 1);
      } else if (peers_[h.rank] >= 0) {
        refused = "two ranks joined as rank " + std::to_string(h.rank);
      }
      if (!refused.empty()) {
        peers_.push_back(fd);  // told below, then closed
        break;
      }
      peers_[h.rank] = fd;
      ++joined;
    }
    for (size_t q = 1; q < peers_.size(); ++q) {
      if (peers_[q] < 0) continue;
      const uint8_t status = refused.empty() ? 0 : 1;
      write_all(peers_[q], &status, 1, deadline);
      if (!refused.empty()) write_value(peers_[q], std::as_bytes(std::span(refused.data(), refused.size())), deadline);
    }
    peers_.resize(static_cast<size_t>(size));
    if (!refused.empty()) fail(refused);
    return;
  }
  // A rank other than 0: connect (rank 0 may not listen yet), say hello, wait for the answer.
  std::string last = "no answer";
  while (peers_[0] < 0) {
    for (addrinfo* a = info.list; a != nullptr; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) continue;
      if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
        peers_[0] = fd;
        break;
      }
      last = errno_text();
      ::close(fd);
    }
    if (peers_[0] >= 0) break;
    if (deadline.passed()) fail("rank 0 did not answer within " + seconds + " s (" + last + ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const int on = 1;
  ::setsockopt(peers_[0], IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  const Hello h{kMagic, kVersion, static_cast<uint32_t>(rank), static_cast<uint32_t>(size)};
  uint8_t status = 1;
  std::string e = write_all(peers_[0], &h, sizeof h, deadline);
  if (e.empty()) e = read_all(peers_[0], &status, 1, deadline);
  if (!e.empty()) fail("joining rank 0: " + e);
  if (status != 0) {
    std::vector<std::byte> why;
    read_value(peers_[0], why, deadline);
    fail("rank 0 refused the start: " + std::string(reinterpret_cast<const char*>(why.data()), why.size()));
  }
}

TcpRendezvous::~TcpRendezvous() { close_all(); }

void TcpRendezvous::close_all() {
  for (int& fd : peers_) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  if (listener_ >= 0) ::close(listener_);
  listener_ = -1;
}

void TcpRendezvous::fail(const std::string& why) {
  failed_ = true;
  close_all();
  throw Error(where_ + ": " + why);
}

void TcpRendezvous::abort(const std::string& reason) {
  (void)reason;  // the caller reports it; the peers see the connection close
  failed_ = true;
  close_all();
}

std::vector<std::vector<std::byte>> TcpRendezvous::exchange(std::span<const std::byte> mine, bool untimed) {
  if (failed_) fail("an earlier exchange failed");
  if (mine.size() > kMaxRendezvousBytes) fail("a value of " + std::to_string(mine.size()) + " bytes is over the limit");
  const Deadline d{Clock::now() + timeout_, untimed};
  std::vector<std::vector<std::byte>> all(static_cast<size_t>(size_));
  all[static_cast<size_t>(rank_)].assign(mine.begin(), mine.end());
  if (size_ == 1) return all;
  if (rank_ != 0) {
    std::string e = write_value(peers_[0], mine, d);
    for (int q = 0; q < size_ && e.empty(); ++q) e = read_value(peers_[0], all[static_cast<size_t>(q)], d);
    if (!e.empty()) fail("rank 0: " + e);
    return all;
  }
  for (int q = 1; q < size_; ++q) {
    if (std::string e = read_value(peers_[static_cast<size_t>(q)], all[static_cast<size_t>(q)], d); !e.empty()) {
      fail("rank " + std::to_string(q) + ": " + e);
    }
  }
  for (int q = 1; q < size_; ++q) {
    for (const auto& v : all) {
      if (std::string e = write_value(peers_[static_cast<size_t>(q)], v, d); !e.empty()) fail("rank " + std::to_string(q) + ": " + e);
    }
  }
  return all;
}

void TcpRendezvous::all_gather(std::span<const std::byte> send, std::span<std::byte> recv) {
  if (recv.size() != send.size() * static_cast<size_t>(size_)) fail("all_gather: receive size does not match");
  const auto all = exchange(send);
  for (int q = 0; q < size_; ++q) {
    const auto& v = all[static_cast<size_t>(q)];
    if (v.size() != send.size()) fail("all_gather: rank " + std::to_string(q) + " sent " + std::to_string(v.size()) + " bytes, not " + std::to_string(send.size()));
    std::memcpy(recv.data() + static_cast<size_t>(q) * send.size(), v.data(), v.size());
  }
}

void TcpRendezvous::broadcast_from(std::span<std::byte> data, int root, bool untimed) {
  if (root < 0 || root >= size_) fail("broadcast: no rank " + std::to_string(root));
  const auto all = exchange(rank_ == root ? std::span<const std::byte>(data) : std::span<const std::byte>(), untimed);
  const auto& v = all[static_cast<size_t>(root)];
  if (v.size() != data.size()) {
    fail("broadcast: rank " + std::to_string(root) + " sent " + std::to_string(v.size()) + " bytes, not " + std::to_string(data.size()));
  }
  std::memcpy(data.data(), v.data(), v.size());
}

void TcpRendezvous::broadcast(std::span<std::byte> data, int root) { broadcast_from(data, root, false); }

void TcpRendezvous::broadcast_untimed(std::span<std::byte> data, int root) { broadcast_from(data, root, true); }

void TcpRendezvous::barrier() { exchange({}); }

void TcpRendezvous::all_reduce(std::span<float>, ReduceOp) { refuse("all_reduce"); }

void TcpRendezvous::reduce_scatter(std::span<const float>, std::span<float>, ReduceOp) { refuse("reduce_scatter"); }

void TcpRendezvous::all_to_all_v(std::span<const std::byte>, std::span<const size_t>, std::span<std::byte>, std::span<const size_t>) {
  refuse("all_to_all_v");
}

void TcpRendezvous::refuse(const char* collective) {
  fail(std::string(collective) + ": the rendezvous carries the start only; the model's collectives run over NCCL");
}

}  // namespace k3
