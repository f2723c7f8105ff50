// A program for `mpirun` (tests/parallel/test_mpi_world.cpp drives it):
//   k3_mpi_driver collectives        every collective against its serial definition; "rank R/N: ok"
//   k3_mpi_driver die RANK           all-reduces in a loop; RANK kills itself with SIGKILL
//   k3_mpi_driver stall RANK MS      all-reduces in a loop; RANK stops calling (stays alive) and the
//                                    others fail after MS milliseconds
// Errors print one line "k3_mpi_driver: error: …" and exit 1 (the world then aborts the job).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>

#include "collective_checks.h"
#include "parallel/mpi/mpi_world.h"

int main(int argc, char** argv) {
  using namespace k3;
  const std::string mode = argc > 1 ? argv[1] : "";
  const int victim = argc > 2 ? std::stoi(argv[2]) : -1;
  const auto timeout = std::chrono::milliseconds(argc > 3 ? std::stoi(argv[3]) : 60000);
  std::optional<MpiWorld> mpi;  // outlives the error message: its destructor ends a failed job
  try {
    MpiWorld& world = mpi.emplace(timeout);
    if (mode == "collectives") {
      const std::vector<std::string> failures = test::collective_failures(world);
      for (const std::string& f : failures) std::printf("%s\n", f.c_str());
      if (failures.empty()) std::printf("rank %d/%d: ok\n", world.rank(), world.size());
      std::fflush(stdout);
      return failures.empty() ? 0 : 1;
    }
    if (mode != "die" && mode != "stall") {
      std::fprintf(stderr, "k3_mpi_driver: error: unknown mode '%s'\n", mode.c_str());
      return 2;
    }
    std::vector<float> v(64, 1.0f);
    for (int i = 0; i < 1000; ++i) {
      if (i == 10 && world.rank() == victim) {
        if (mode == "die") ::raise(SIGKILL);
        std::this_thread::sleep_for(std::chrono::seconds(60));
      }
      world.all_reduce(v, ReduceOp::kMax);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "k3_mpi_driver: error: %s\n", e.what());
    return 1;
  }
}
