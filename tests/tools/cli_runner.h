// Runs the built k3 CLI in a shell and captures stdout, stderr and the exit code.
#pragma once

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>

namespace k3::test {

struct CliResult {
  int code = -1;
  std::string out;
  std::string err;
};

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `args` is appended to the k3 path as shell words (callers quote as needed).
inline CliResult run_k3(const std::string& args) {
  static int counter = 0;
  const std::string base = "/tmp/k3_cli_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++);
  const std::string cmd = std::string(K3_CLI_PATH) + " " + args + " >" + base + ".out 2>" + base + ".err";
  const int status = std::system(cmd.c_str());
  CliResult r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(base + ".out");
  r.err = slurp(base + ".err");
  std::remove((base + ".out").c_str());
  std::remove((base + ".err").c_str());
  return r;
}

inline std::string shared_dir() { return K3_SHARED_DIR; }

}  // namespace k3::test
