// MPI ranks (parallel/mpi/mpi_world.h) in separate processes started by mpirun, through the
// k3_mpi_driver program: the collectives at 2 and 4 ranks, a rank killed with SIGKILL, a rank that
// stops calling. A failure ends the job with a clear error within seconds, never a hang. Skipped
// in builds without MPI and under the sanitizers (the MPI library's own allocations).
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <string>

namespace {

#if defined(K3_MPI_DRIVER) && !defined(K3_SANITIZED)
struct MpirunResult {
  int code = -1;
  std::string output;
  double seconds = 0;
};

MpirunResult mpirun(int ranks, const std::string& args) {
  const std::string cmd = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 "
                          "timeout 60 " K3_MPIRUN " -np " + std::to_string(ranks) + " " K3_MPI_DRIVER " " + args + " 2>&1";
  MpirunResult r;
  const auto t0 = std::chrono::steady_clock::now();
  FILE* p = ::popen(cmd.c_str(), "r");
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
#else
TEST(MpiWorld, NeedsMpi) { GTEST_SKIP() << "built without MPI (or under the sanitizers)"; }
#endif

}  // namespace
