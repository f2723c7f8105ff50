// CUDA device discovery and the wiring check kernel. Host-only header (no CUDA types).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace k3::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int major = 0;
  int minor = 0;
  uint64_t total_bytes = 0;
  int multiprocessors = 0;
};

// Empty when the driver reports no device (or no driver): callers skip GPU work.
std::vector<DeviceInfo> list_devices();

// The current device's streaming multiprocessors (throws a k3::Error on a CUDA error): grid sizing.
int current_multiprocessors();

// out[i] = a * x[i] + y[i] on device 0, through host buffers; proves the build runs kernels.
void saxpy(float a, const std::vector<float>& x, const std::vector<float>& y, std::vector<float>& out);

}  // namespace k3::cuda
