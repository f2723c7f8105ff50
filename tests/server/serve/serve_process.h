// A `k3 serve` child process for the server tests: spawned with fork/exec, ready once it prints its
// "ready at http://HOST:PORT/v1" line (the port is read from it), stopped with SIGTERM. Plus small
// clients over RawClient (server/http_test_client.h): one request, the /metrics gauges, and the
// server-sent events of a streamed body.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "server/http_test_client.h"
#include "tools/cli_runner.h"

namespace k3::server::test {

class ServeProcess {
 public:
  // Starts `LAUNCHER... k3 serve --model MODEL --port 0 ARGS...` (a launcher such as mpirun, or
  // none); its stderr goes to `log` (read by stderr_text()).
  ServeProcess(const std::string& model, const std::vector<std::string>& args, const std::string& log,
               const std::vector<std::string>& launcher = {})
      : log_(log) {
    int out[2];
    if (::pipe(out) != 0) return;
    std::vector<std::string> argv = launcher;
    for (const char* a : {K3_CLI_PATH, "serve", "--model"}) argv.push_back(a);
    argv.insert(argv.end(), {model, "--port", "0"});
    argv.insert(argv.end(), args.begin(), args.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      // Sleeping OpenMP waits: spinning workers starve each other on a loaded machine.
      ::setenv("OMP_WAIT_POLICY", "passive", 0);
      ::dup2(out[1], 1);
      const int err = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      if (err >= 0) ::dup2(err, 2);
      ::close(out[0]);
      std::vector<char*> c;
      for (std::string& a : argv) c.push_back(a.data());
      c.push_back(nullptr);
      ::execvp(c[0], c.data());
      ::_exit(127);
    }
    ::close(out[1]);
    out_ = out[0];
    read_ready_line(60);
  }
  // Stops a running server with SIGTERM; a server that does not exit 0 then (a crash, a sanitizer
  // report) fails the test, with its stderr.
  ~ServeProcess() {
    if (pid_ > 0 && alive()) {
      signal(SIGTERM);
      const int code = wait_exit(30);
      if (code != 0) ADD_FAILURE() << "k3 serve did not exit 0 after SIGTERM (" << code << "):\n" << stderr_text();
      if (alive()) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
      }
    }
    if (out_ >= 0) ::close(out_);
  }
  ServeProcess(const ServeProcess&) = delete;
  ServeProcess& operator=(const ServeProcess&) = delete;

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string stderr_text() const { return k3::test::slurp(log_); }
  bool alive() {
    if (exited_) return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      status_ = status;
    }
    return !exited_;
  }
  void signal(int sig) { ::kill(pid_, sig); }
  // Waits up to `timeout_s` for the process to end: its exit code, −1 after a signal or the timeout.
  int wait_exit(double timeout_s) {
    const auto t0 = std::chrono::steady_clock::now();
    while (alive()) {
      if (seconds_since(t0) > timeout_s) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return WIFEXITED(status_) ? WEXITSTATUS(status_) : -1;
  }

 private:
  void read_ready_line(double timeout_s) {
    const auto t0 = std::chrono::steady_clock::now();
    std::string text;
    while (seconds_since(t0) < timeout_s) {
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) {
        if (!alive()) return;
        continue;
      }
      char b[512];
      const ssize_t n = ::read(out_, b, sizeof b);
      if (n <= 0) return;
      text.append(b, static_cast<size_t>(n));
      const size_t at = text.find("ready at http://");
      const size_t colon = at == std::string::npos ? at : text.find(':', at + 16);
      if (colon != std::string::npos && text.find("/v1", colon) != std::string::npos) {
        port_ = std::atoi(text.c_str() + colon + 1);
        return;
      }
    }
  }

  std::string log_;
  pid_t pid_ = -1;
  int out_ = -1;
  int port_ = 0;
  bool exited_ = false;
  int status_ = 0;
};

// One request on a fresh connection (Connection: close); the response with its body decoded.
inline RawClient::Response http_request(int port, const std::string& method, const std::string& path,
                                        const std::string& body = "", const std::string& key = "",
                                        double timeout_s = 30) {
  RawClient c(port, timeout_s);
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n";
  if (!key.empty()) req += "Authorization: Bearer " + key + "\r\n";
  if (!body.empty() || method == "POST") {
    req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  req += "\r\n" + body;
  if (!c.send(req)) return {};
  return c.read_response();
}

// The unlabelled samples of /metrics (name → value); empty when it did not answer.
inline std::map<std::string, double> metrics_of(int port) {
  std::map<std::string, double> m;
  const RawClient::Response r = http_request(port, "GET", "/metrics");
  size_t at = 0;
  while (at < r.body.size()) {
    size_t end = r.body.find('\n', at);
    if (end == std::string::npos) end = r.body.size();
    const std::string line = r.body.substr(at, end - at);
    at = end + 1;
    const size_t space = line.find(' ');
    if (line.empty() || line[0] == '#' || space == std::string::npos) continue;
    m[line.substr(0, space)] = std::strtod(line.c_str() + space + 1, nullptr);
  }
  return m;
}

// Splits a decoded text/event-stream body into its events' data ("" marks a malformed event: each
// must be exactly one "data: ...\n\n").
inline std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> events;
  size_t at = 0;
  while (at < body.size()) {
    const size_t end = body.find("\n\n", at);
    const std::string event = body.substr(at, end == std::string::npos ? std::string::npos : end - at);
    const bool framed = end != std::string::npos && event.rfind("data: ", 0) == 0 && event.find('\n') == std::string::npos;
    events.push_back(framed ? event.substr(6) : "");
    if (end == std::string::npos) break;
    at = end + 2;
  }
  return events;
}

}  // namespace k3::server::test
