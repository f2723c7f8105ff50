#include "tools/node_ranks.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "parallel/ranks.h"
#include "tools/flag_checks.h"

namespace k3::cli {
namespace {

// The environment a rank process gets from its node's supervisor.
constexpr const char* kRankEnv = "K3_NODE_RANK_GLOBAL";
constexpr const char* kLocalRankEnv = "K3_NODE_RANK_LOCAL";
constexpr const char* kWorldEnv = "K3_NODE_RANK_WORLD";

#ifdef K3_HAVE_NCCL

// This process's own command line, as the kernel holds it.
std::vector<std::string> own_arguments() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i] == '\0') {
      out.push_back(all.substr(start, i - start));
      start = i + 1;
    }
  }
  if (out.empty()) throw Error(Where{"/proc/self/cmdline", "", ""}, "cannot read this process's command line");
  return out;
}

std::vector<pid_t> g_ranks;  // the supervisor's rank processes, for its signal handler

extern "C" void forward_signal(int sig) {
  for (pid_t p : g_ranks) {
    if (p > 0) ::kill(p, sig);
  }
}

// Ends the rank processes still running: SIGTERM, then SIGKILL after the grace period.
void end_ranks(std::vector<pid_t>& running) {
  for (pid_t p : running) {
    if (p > 0) ::kill(p, SIGTERM);
  }
  for (int tenth = 0; tenth < kRankGraceSeconds * 10; ++tenth) {
    bool any = false;
    for (pid_t& p : running) {
      if (p > 0 && ::waitpid(p, nullptr, WNOHANG) == p) p = 0;
      any = any || p > 0;
    }
    if (!any) return;
    ::usleep(100000);
  }
  for (pid_t& p : running) {
    if (p > 0) {
      ::kill(p, SIGKILL);
      ::waitpid(p, nullptr, 0);
      p = 0;
    }
  }
}

std::string exit_text(int status) {
  if (WIFSIGNALED(status)) return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  return "exited with code " + std::to_string(WEXITSTATUS(status));
}

#endif

}  // namespace

void add_node_rank_options(CLI::App* cmd, ModelArgs& args) {
  cmd->add_option("--nnodes", args.nnodes,
                  "with --device cuda and N ranks (--expert-parallel, --tensor-parallel): start without mpirun, over this "
                  "many nodes (N / nnodes rank processes here, one per GPU); run the same command on every node with its "
                  "--node-rank")
      ->check(integer_in(1, kMaxParallelRanks));
  cmd->add_option("--node-rank", args.node_rank, "with --nnodes: this node's index, 0 on the node of --master-addr")
      ->check(integer_in(0, kMaxParallelRanks - 1));
  cmd->add_option("--master-addr", args.master_addr, "with --nnodes: the host of node 0, where rank 0 listens (default 127.0.0.1)");
  cmd->add_option("--master-port", args.master_port, "with --nnodes: the TCP port rank 0 listens on (default 29500)")
      ->check(integer_in(1, 65535));
}

std::optional<NodeRank> started_node_rank() {
  const char* rank = std::getenv(kRankEnv);
  const char* local = std::getenv(kLocalRankEnv);
  const char* world = std::getenv(kWorldEnv);
  if (!rank || !local || !world) return std::nullopt;
  return NodeRank{std::atoi(rank), std::atoi(local), std::atoi(world)};
}

void start_node_ranks(const ModelArgs& args) {
  const bool node_flags = args.node_rank != 0 || args.master_addr != kDefaultMasterAddr || args.master_port != kDefaultMasterPort;
  if (args.nnodes == 0) {
    if (node_flags) throw Error(Where{"", "", "--node-rank"}, "--node-rank, --master-addr and --master-port go with --nnodes");
    return;
  }
  if (started_node_rank()) return;  // a rank process: launched_ranks.cpp joins the world
  if (args.device.rfind("cuda", 0) != 0) {
    throw Error(Where{"", "", "--nnodes"}, "starts CUDA ranks over NCCL (--device cuda); CPU ranks in several processes run under mpirun");
  }
  const int world = ParallelLayout{args.tensor_parallel, args.expert_parallel}.world();
  if (world % args.nnodes != 0) {
    throw Error(Where{"", "", "--nnodes"}, std::to_string(world) + " ranks (--tensor-parallel, --expert-parallel) do not divide over " +
                                               std::to_string(args.nnodes) + " nodes");
  }
  if (args.node_rank >= args.nnodes) {
    throw Error(Where{"", "", "--node-rank"}, std::to_string(args.node_rank) + " is not a node of " + std::to_string(args.nnodes));
  }
#ifndef K3_HAVE_NCCL
  throw Error(Where{"", "", "--nnodes"}, "this k3 was built without NCCL (configure with the CUDA backend and NCCL found, "
                                         "or -DK3_NCCL_ROOT=DIR)");
#else
  const int per_node = world / args.nnodes;
  std::vector<std::string> argv_text = own_arguments();
  std::vector<char*> argv;
  for (std::string& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(nullptr);
  for (int local = 0; local < per_node; ++local) {
    const int rank = args.node_rank * per_node + local;
    // The rank's environment is made before fork: between fork and exec the child only calls
    // async-signal-safe functions (this process may have other threads).
    std::vector<std::string> env_text = {std::string(kRankEnv) + "=" + std::to_string(rank),
                                         std::string(kLocalRankEnv) + "=" + std::to_string(local),
                                         std::string(kWorldEnv) + "=" + std::to_string(world)};
    for (char** e = environ; *e != nullptr; ++e) env_text.emplace_back(*e);
    std::vector<char*> envp;
    for (std::string& e : env_text) envp.push_back(e.data());
    envp.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) {
      const std::string why = std::strerror(errno);
      end_ranks(g_ranks);
      throw Error(Where{"", "", "--nnodes"}, "cannot start rank " + std::to_string(rank) + ": " + why);
    }
    if (pid == 0) {
      ::execve("/proc/self/exe", argv.data(), envp.data());
      constexpr char kCannotStart[] = "k3: a rank process cannot start: exec of /proc/self/exe failed\n";
      const ssize_t ignored = ::write(STDERR_FILENO, kCannotStart, sizeof kCannotStart - 1);
      (void)ignored;
      ::_exit(127);
    }
    g_ranks.push_back(pid);
  }
  std::signal(SIGINT, forward_signal);
  std::signal(SIGTERM, forward_signal);
  // Wait for every rank; the first that fails ends the others.
  int code = 0;
  for (size_t left = g_ranks.size(); left > 0;) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    size_t i = 0;
    while (i < g_ranks.size() && g_ranks[i] != pid) ++i;
    if (i == g_ranks.size()) continue;
    g_ranks[i] = 0;
    --left;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    std::fprintf(stderr, "k3: node %d: rank %d %s; ending this node's other ranks\n", args.node_rank,
                 args.node_rank * per_node + static_cast<int>(i), exit_text(status).c_str());
    end_ranks(g_ranks);
    code = 1;
    break;
  }
  std::exit(code);
#endif
}

}  // namespace k3::cli
