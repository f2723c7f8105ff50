// MPI ranks (parallel/mpi/mpi_world.h) in separate processes started by mpirun, through the
// k3_mpi_driver program: the collectives at 2 and 4 ranks, a rank killed with SIGKILL, a rank that
// stops calling. Then the k3 CLI under mpirun (tools/launched_ranks.h): one engine over 2 and 4
// processes gives the tokens of one process; a rank killed, terminated or stopped during generation
// ends every rank with a clear line. A failure ends the job within seconds, never a hang. Skipped in builds
// without MPI and under the sanitizers (the MPI library's own allocations).
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

#include "model/engine_test_util.h"
#include "server/serve/serve_process.h"
#include "tools/cli_runner.h"

namespace {

#if defined(K3_MPI_DRIVER) && !defined(K3_SANITIZED)
struct MpirunResult {
  int code = -1;
  std::string output;
  double seconds = 0;
};

// Runs `program args` under mpirun; `during`, when given, runs while the job does (after it started).
MpirunResult mpirun(int ranks, const std::string& args, const std::string& program = K3_MPI_DRIVER,
                    const std::function<void()>& during = {}) {
  const std::string cmd = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 "
                          "timeout 60 " K3_MPIRUN " -np " + std::to_string(ranks) + " " + program + " " + args + " 2>&1";
  MpirunResult r;
  const auto t0 = std::chrono::steady_clock::now();
  FILE* p = ::popen(cmd.c_str(), "r");
  if (during) during();
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

TEST(MpiWorld, CollectivesMatchTheirSerialDefinitions) {
  for (int ranks : {2, 4}) {
    const MpirunResult r = mpirun(ranks, "collectives");
    EXPECT_EQ(r.code, 0) << r.output;
    for (int q = 0; q < ranks; ++q) {
      EXPECT_NE(r.output.find("rank " + std::to_string(q) + "/" + std::to_string(ranks) + ": ok"), std::string::npos) << r.output;
    }
  }
}

TEST(MpiWorld, AKilledRankEndsTheJobWithAClearError) {
  const MpirunResult r = mpirun(2, "die 0");
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.code, 124) << "timed out: " << r.output;
  EXPECT_NE(r.output.find("rank 0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("signal 9"), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 30) << r.output;
}

TEST(MpiWorld, ARankThatStopsCallingTimesTheOthersOut) {
  const MpirunResult r = mpirun(2, "stall 1 1000");
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.code, 124) << "timed out: " << r.output;
  EXPECT_NE(r.output.find("k3_mpi_driver: error: parallel world failed: rank 0 waited 1000 ms in all_gather for the other ranks"),
            std::string::npos)
      << r.output;
  EXPECT_LT(r.seconds, 30) << r.output;
}
// The pid of the k3 process of MPI rank `rank` whose command line holds `marker`; 0 when none
// appears within 20 s.
pid_t rank_pid(int rank, const std::string& marker) {
  for (int attempt = 0; attempt < 200; ++attempt) {
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
      const std::string name = entry.path().filename();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream cmdline(entry.path() / "cmdline"), environ(entry.path() / "environ");
      std::string args((std::istreambuf_iterator<char>(cmdline)), {});
      const std::string env((std::istreambuf_iterator<char>(environ)), {});
      std::replace(args.begin(), args.end(), '\0', ' ');
      if (args.find(marker) == std::string::npos || args.find("mpirun") != std::string::npos) continue;
      if (env.find(std::string("OMPI_COMM_WORLD_RANK=") + std::to_string(rank) + '\0') != std::string::npos) {
        return static_cast<pid_t>(std::stol(name));
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return 0;
}

class MpiEngine : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { tiny_ = new k3::test::TinyCheckpoint(k3::test::make_tiny_conditioned(k3::FamilyId::Bf16, k3::TinyArch::KimiK3, 31)); }
  static void TearDownTestSuite() { delete tiny_; }
  static std::string generate(const std::string& extra) {
    return "generate --model " + tiny_->dir + " --ids 5,17,99,3,250 --max-tokens 12 --temperature 0.7 --seed 2 --ignore-eos --threads 1 " + extra;
  }
  static inline k3::test::TinyCheckpoint* tiny_ = nullptr;
};

TEST_F(MpiEngine, OneEngineOverProcessesGivesTheTokensOfOne) {
  const k3::test::CliResult one = k3::test::run_k3(generate(""));
  ASSERT_EQ(one.code, 0) << one.err;
  for (const auto& [ranks, layout] : {std::pair{2, "--tensor-parallel 2"}, std::pair{4, "--tensor-parallel 2 --expert-parallel 4"}}) {
    const MpirunResult r = mpirun(ranks, generate(layout), K3_CLI_PATH);
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(r.output, one.out) << layout;  // rank 0 prints the tokens, the others nothing
  }
  const MpirunResult wrong = mpirun(2, generate("--expert-parallel 4"), K3_CLI_PATH);
  EXPECT_NE(wrong.code, 0);
  EXPECT_NE(wrong.output.find("mpirun started 2 ranks, but --tensor-parallel 1 and --expert-parallel 4 use 4"), std::string::npos)
      << wrong.output;
}

// Whether process `pid` catches `signal` (its SigCgt mask in /proc), polled for up to 20 s: k3
// installs its SIGTERM handler once the ranks have joined.
bool catches(pid_t pid, int signal) {
  for (int attempt = 0; attempt < 200; ++attempt) {
    std::ifstream status("/proc/" + std::to_string(pid) + "/status");
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("SigCgt:", 0) == 0 && (std::stoull(line.substr(7), nullptr, 16) >> (signal - 1) & 1)) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

// A long generation; `signal` goes to rank `rank` once the job runs.
MpirunResult disturbed_generation(const std::string& model, int rank, int signal, const std::string& extra) {
  const std::string marker = model + " --ids 7,8,9 ";
  return mpirun(2, "generate --model " + marker + "--max-tokens 1000000 --max-context 2000000 --ignore-eos --threads 1 --tensor-parallel 2 " + extra,
                K3_CLI_PATH, [&] {
                  const pid_t pid = rank_pid(rank, marker);
                  ASSERT_GT(pid, 0) << "rank " << rank << " never appeared";
                  EXPECT_TRUE(catches(pid, SIGTERM)) << "rank " << rank << " never joined";
                  std::this_thread::sleep_for(std::chrono::seconds(1));  // loaded, generating
                  ::kill(pid, signal);
                });
}

// mpirun names the killed rank and ends the job. The survivors it ends with SIGTERM may say so too,
// but mpirun can stop forwarding their output first, so only its own line is asserted here.
TEST_F(MpiEngine, AKilledRankEndsEveryRankWithAClearLine) {
  for (int killed : {1, 0}) {
    const MpirunResult r = disturbed_generation(tiny_->dir, killed, SIGKILL, "");
    EXPECT_NE(r.code, 0) << r.output;
    EXPECT_NE(r.code, 124) << "timed out: " << r.output;
    EXPECT_NE(r.output.find("rank " + std::to_string(killed) + " with PID"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("signal 9"), std::string::npos) << r.output;
    EXPECT_LT(r.seconds, 30) << r.output;
  }
}

// A rank ended by SIGTERM (what mpirun sends the survivors of a failed job) says so and exits,
// which ends the job.
TEST_F(MpiEngine, ARankEndedBySigtermSaysSo) {
  const MpirunResult r = disturbed_generation(tiny_->dir, 1, SIGTERM, "");
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.code, 124) << "timed out: " << r.output;
  EXPECT_NE(r.output.find("k3: rank 1 of 2: ended by mpirun: another rank failed or the job was stopped"), std::string::npos)
      << r.output;
  EXPECT_LT(r.seconds, 30) << r.output;
}

TEST_F(MpiEngine, AStoppedRankTimesTheOthersOut) {
  const MpirunResult r = disturbed_generation(tiny_->dir, 1, SIGSTOP, "--rank-timeout 2");
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.code, 124) << "timed out: " << r.output;
  EXPECT_NE(r.output.find("k3 generate: error: parallel world failed: rank 0 waited 2000 ms"), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 30) << r.output;
}
// `k3 serve` under mpirun: rank 0 serves, the other rank follows; a completion equals the one of a
// single-process server, and SIGTERM to rank 0 drains it and ends the whole job with exit code 0.
TEST_F(MpiEngine, ServesLikeOneProcessAndStopsCleanlyFromRankZero) {
  using k3::server::test::ServeProcess;
  const std::string name = "k3_mpi_serve_model_" + std::to_string(::getpid()), model = "/tmp/" + name;  // with a tokenizer
  const std::string body = R"({"model":")" + name + R"(","prompt":"hello there","max_tokens":8,"temperature":0.8,"seed":3,"n":2})";
  const std::string log = "/tmp/k3_mpi_serve_" + std::to_string(::getpid()) + ".log";
  ASSERT_EQ(k3::test::run_k3("make-tiny --arch kimi-k3 --family bf16 --out " + model).code, 0);
  std::string alone;
  {
    ServeProcess one(model, {"--threads", "1"}, log);
    const auto r = k3::server::test::http_request(one.port(), "POST", "/v1/completions", body);
    ASSERT_EQ(r.status, 200) << r.body << one.stderr_text();
    alone = r.body;
  }
  ServeProcess job(model, {"--threads", "1", "--tensor-parallel", "2"}, log,
                   {"env", "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", "OMPI_MCA_rmaps_base_oversubscribe=1",
                    K3_MPIRUN, "-np", "2"});
  ASSERT_GT(job.port(), 0) << job.stderr_text();
  const auto r = k3::server::test::http_request(job.port(), "POST", "/v1/completions", body);
  ASSERT_EQ(r.status, 200) << r.body << job.stderr_text();
  // The same choices; only the id and the creation time differ.
  const auto choices = [](const std::string& json) { return json.substr(json.find("\"choices\"")); };
  EXPECT_EQ(choices(r.body), choices(alone));
  const pid_t leader = rank_pid(0, model + " --port 0");
  ASSERT_GT(leader, 0);
  ::kill(leader, SIGTERM);
  EXPECT_EQ(job.wait_exit(30), 0) << job.stderr_text();
  std::filesystem::remove_all(model);
}
#else
TEST(MpiWorld, NeedsMpi) { GTEST_SKIP() << "built without MPI (or under the sanitizers)"; }
#endif

}  // namespace
