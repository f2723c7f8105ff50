// Raw-socket HTTP client pieces for the HttpServer tests: a blocking socket with a receive
// timeout, and a reader of one response (Content-Length or chunked body, decoded).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <cerrno>
#include <cstdlib>
#include <optional>
#include <string>

namespace k3::server::test {

class RawClient {
 public:
  explicit RawClient(int port, double recv_timeout_s = 3) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    set_timeout(recv_timeout_s);
  }
  ~RawClient() { close(); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool connected() const { return connected_; }
  void set_timeout(double s) {
    timeval tv{static_cast<time_t>(s), static_cast<suseconds_t>((s - static_cast<time_t>(s)) * 1e6)};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  bool send(const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  // Reads more bytes into the buffer: false on EOF, error or timeout (eof() tells which).
  bool fill() {
    char b[4096];
    ssize_t n = ::recv(fd_, b, sizeof b, 0);
    if (n > 0) {
      buf_.append(b, static_cast<size_t>(n));
      return true;
    }
    eof_ = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
    return false;
  }
  bool eof() const { return eof_; }
  // True when the server closed the connection (EOF or reset) before the receive timeout.
  bool wait_closed() {
    while (fill()) {
    }
    return eof_;
  }
  // Reads up to and including `delim`; "" when it did not come.
  std::string read_until(const std::string& delim) {
    size_t p;
    while ((p = buf_.find(delim)) == std::string::npos)
      if (!fill()) return "";
    std::string out = buf_.substr(0, p + delim.size());
    buf_.erase(0, p + delim.size());
    return out;
  }
  std::string read_exactly(size_t n) {
    while (buf_.size() < n)
      if (!fill()) return "";
    std::string out = buf_.substr(0, n);
    buf_.erase(0, n);
    return out;
  }

  // The next chunk of a chunked body: "" for the last (empty) chunk and its trailer, nullopt when
  // the chunk is malformed or the connection ended first.
  std::optional<std::string> read_chunk() {
    std::string line = read_until("\r\n");
    if (line.empty()) return std::nullopt;
    size_t n = std::strtoul(line.c_str(), nullptr, 16);
    if (n == 0) {
      if (read_until("\r\n") != "\r\n") return std::nullopt;
      return std::string();
    }
    std::string data = read_exactly(n + 2);
    if (data.size() != n + 2 || data.compare(n, 2, "\r\n") != 0) return std::nullopt;
    data.resize(n);
    return data;
  }

  struct Response {
    int status = 0;
    std::string head, body;
    bool chunked = false, ok = false;
    bool has(const std::string& line) const { return head.find(line) != std::string::npos; }
  };
  // One whole response; a chunked body is decoded.
  Response read_response() {
    Response r;
    r.head = read_until("\r\n\r\n");
    if (r.head.size() < 12) return r;
    r.status = std::atoi(r.head.c_str() + 9);
    r.chunked = r.has("Transfer-Encoding: chunked");
    if (r.chunked) {
      for (;;) {
        std::optional<std::string> data = read_chunk();
        if (!data) return r;
        if (data->empty()) {
          r.ok = true;
          return r;
        }
        r.body += *data;
      }
    }
    auto p = r.head.find("Content-Length: ");
    size_t n = p == std::string::npos ? 0 : std::strtoul(r.head.c_str() + p + 16, nullptr, 10);
    r.body = read_exactly(n);
    r.ok = r.body.size() == n;
    return r;
  }

 private:
  int fd_ = -1;
  bool connected_ = false, eof_ = false;
  std::string buf_;
};

inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace k3::server::test
