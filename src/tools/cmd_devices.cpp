// `k3 devices`: lists the CUDA devices this build can use (or says the build has no CUDA).
#include <cstdio>

#include "tools/cli.h"
#ifdef K3_HAVE_CUDA
#include "backend/cuda/core/device.h"
#endif

namespace k3::cli {

Registered add_devices(CLI::App& app) {
  auto* cmd = app.add_subcommand("devices", "List the CUDA devices available to k3");
  return {cmd, [] {
#ifdef K3_HAVE_CUDA
            auto devices = k3::cuda::list_devices();
            if (devices.empty()) std::printf("CUDA backend built; no CUDA device found\n");
            for (const auto& d : devices) {
              std::printf("cuda:%d  %s  sm_%d%d  %.1f GiB  %d SMs\n", d.index, d.name.c_str(), d.major,
                          d.minor, d.total_bytes / double(1ull << 30), d.multiprocessors);
            }
#else
            std::printf("this k3 was built without the CUDA backend\n");
#endif
            return 0;
          }};
}

}  // namespace k3::cli
