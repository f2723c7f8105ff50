// Load client: opens CONNS concurrent SSE streams (GET /events) on loopback, decodes the chunked
// responses, and reports completed streams, errors, event latency (producer stamp -> receipt) and
// the server's threads / RSS / CPU time sampled from /proc/SERVER_PID.
// Usage: sse_load PORT CONNS EVENTS SERVER_PID [seq]
// Connections open 50 per 10 ms; with `seq`, one at a time, each after the previous one's response
// header arrived (for a server whose listen backlog cannot take a burst).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>
#include "sse_common.h"

struct Conn {
  int fd = -1;
  std::string buf;
  bool headers = false, done = false, failed = false;
  size_t chunk_left = 0;  // bytes of the current chunk still to come (+2 for its CRLF)
  bool in_chunk = false;
  std::string body;  // decoded, not yet split into events
  int events = 0;
};

struct Proc { long threads = 0, rss_kb = 0, hwm_kb = 0; double cpu_s = 0; };
static Proc sample(int pid) {
  Proc p;
  std::ifstream st("/proc/" + std::to_string(pid) + "/status");
  std::string k;
  long v;
  while (st >> k) {
    if (k == "Threads:") st >> p.threads;
    else if (k == "VmRSS:") st >> p.rss_kb;
    else if (k == "VmHWM:") st >> p.hwm_kb;
    else if (k == "x") st >> v;
  }
  std::ifstream s2("/proc/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(s2)), {});
  auto rp = all.rfind(')');
  std::vector<std::string> f;
  size_t i = rp + 2;
  while (i < all.size()) { size_t j = all.find(' ', i); if (j == std::string::npos) j = all.size(); f.push_back(all.substr(i, j - i)); i = j + 1; }
  if (f.size() > 13) p.cpu_s = (std::atol(f[11].c_str()) + std::atol(f[12].c_str())) / double(sysconf(_SC_CLK_TCK));
  return p;
}

static std::vector<int64_t> lat;

// Decodes what arrived; returns false on a framing error.
static bool feed(Conn& c) {
  int64_t now = now_ns();
  if (!c.headers) {
    auto e = c.buf.find("\r\n\r\n");
    if (e == std::string::npos) return true;
    if (c.buf.compare(0, 12, "HTTP/1.1 200") != 0) return false;
    c.headers = true;
    c.buf.erase(0, e + 4);
  }
  for (;;) {
    if (!c.in_chunk) {
      auto e = c.buf.find("\r\n");
      if (e == std::string::npos) return true;
      size_t n = std::strtoul(c.buf.c_str(), nullptr, 16);
      c.buf.erase(0, e + 2);
      if (n == 0) { c.done = true; return true; }
      c.in_chunk = true;
      c.chunk_left = n + 2;
    }
    if (c.buf.size() < c.chunk_left) return true;
    c.body.append(c.buf, 0, c.chunk_left - 2);
    c.buf.erase(0, c.chunk_left);
    c.in_chunk = false;
    size_t p;
    while ((p = c.body.find("\n\n")) != std::string::npos) {
      auto t = c.body.find("\"t\":");
      if (t == std::string::npos || t > p || c.body.compare(0, 6, "data: ") != 0) return false;
      lat.push_back(now - std::atoll(c.body.c_str() + t + 4));
      ++c.events;
      c.body.erase(0, p + 2);
    }
  }
}

int main(int argc, char** argv) {
  int port = std::atoi(argv[1]), n = std::atoi(argv[2]), events = std::atoi(argv[3]), pid = std::atoi(argv[4]);
  bool seq = argc > 5 && std::string(argv[5]) == "seq";
  Proc p0 = sample(pid);
  int ep = epoll_create1(0);
  std::vector<Conn> cs(n);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const char req[] = "GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n";
  int64_t t0 = now_ns();
  static char rb[65536];
  int connect_errors = 0;
  for (int i = 0; i < n; ++i) {
    // Ramp: 50 connections every 10 ms.
    if (!seq && i && i % 50 == 0) usleep(10000);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, (sockaddr*)&a, sizeof a) != 0 || send(fd, req, sizeof req - 1, 0) != (ssize_t)sizeof req - 1) {
      ++connect_errors;
      cs[i].failed = true;
      close(fd);
      continue;
    }
    if (seq) {
      timeval tv{5, 0};
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      while (cs[i].buf.find("\r\n\r\n") == std::string::npos) {
        ssize_t r = recv(fd, rb, sizeof rb, 0);
        if (r <= 0) break;
        cs[i].buf.append(rb, r);
      }
    }
    fcntl(fd, F_SETFL, O_NONBLOCK);
    cs[i].fd = fd;
    epoll_event ev{EPOLLIN, {.u32 = (uint32_t)i}};
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
  }
  int open = n - connect_errors, completed = 0, errors = connect_errors;
  Proc peak = sample(pid);
  int64_t last_sample = now_ns(), deadline = t0 + int64_t(events) * 20'000'000 * 3 + 10'000'000'000;
  std::vector<epoll_event> evs(256);
  while (open > 0 && now_ns() < deadline) {
    int k = epoll_wait(ep, evs.data(), evs.size(), 100);
    for (int j = 0; j < k; ++j) {
      Conn& c = cs[evs[j].data.u32];
      for (;;) {
        ssize_t r = recv(c.fd, rb, sizeof rb, 0);
        if (r > 0) { c.buf.append(rb, r); continue; }
        if (r < 0 && errno == EAGAIN) break;
        c.failed = !c.done;  // EOF or error before the last chunk
        break;
      }
      if (!c.failed && !feed(c)) c.failed = true;
      if (c.done || c.failed) {
        if (c.done && c.events == events) ++completed; else ++errors;
        epoll_ctl(ep, EPOLL_CTL_DEL, c.fd, nullptr);
        close(c.fd);
        --open;
      }
    }
    if (now_ns() - last_sample > 100'000'000) {
      Proc p = sample(pid);
      peak.threads = std::max(peak.threads, p.threads);
      peak.rss_kb = std::max(peak.rss_kb, p.rss_kb);
      last_sample = now_ns();
    }
  }
  Proc p1 = sample(pid);
  std::sort(lat.begin(), lat.end());
  auto pct = [&](double q) { return lat.empty() ? 0.0 : lat[std::min(lat.size() - 1, size_t(q * lat.size()))] / 1e6; };
  std::printf("streams=%d completed=%d errors=%d (connect %d) unfinished=%d events=%zu wall=%.2fs\n", n, completed,
              errors, connect_errors, open, lat.size(), (now_ns() - t0) / 1e9);
  std::printf("server: threads_peak=%ld rss_peak=%.1fMiB hwm=%.1fMiB cpu=%.2fs\n", peak.threads, peak.rss_kb / 1024.0,
              p1.hwm_kb / 1024.0, p1.cpu_s - p0.cpu_s);
  std::printf("latency ms: p50=%.3f p99=%.3f max=%.3f\n", pct(0.5), pct(0.99), pct(1.0));
}
