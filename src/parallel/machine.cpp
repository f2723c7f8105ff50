#include "parallel/machine.h"

#include <cctype>

#include "core/error.h"

namespace k3 {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

std::vector<DeviceKind> make_kinds() {
  // Datasheet: NVIDIA H200 SXM 141 GB HBM3e at 4.8 TB/s; H100 SXM 80 GB HBM3 at 3.35 TB/s; both
  // 989 TFLOP/s dense bf16, NVLink 4 at 900 GB/s bidirectional (450 per direction), PCIe Gen5 ×16
  // (64 GB/s per direction).
  const double nvlink = 0.8 * 450e9;  // assumption: ~ the bus bandwidth nccl-tests all_reduce reports on 8 SXM GPUs
  const double pcie = 53.9e9;         // k3's expert streaming host→device on the H200 (docs/performance.md)
  return {
      // 139.8 GiB: the H200's total as k3 reads it (docs/performance.md, machine h200); 3.83 TB/s and
      // 797 TFLOP/s: k3's measured read ceiling and cuBLASLt bf16 8192³ on it.
      {"H200", 143155 * kMiB, 4.8e12, 3.83e12, 797e12, nvlink, pcie},
      // 81,559 MiB: what nvidia-smi reports for an H100 SXM 80 GB; 3.08 TB/s: k3's fastest streaming
      // read measured on it (the MLA decode reading 2.42 GB of cache rows, docs/performance.md, machine
      // h100); the same GH100 tensor cores as the H200.
      {"H100", 81559 * kMiB, 3.35e12, 3.08e12, 797e12, nvlink, pcie},
  };
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

const std::vector<DeviceKind>& device_kinds() {
  static const std::vector<DeviceKind> kinds = make_kinds();
  return kinds;
}

std::string Machine::describe() const {
  const std::string per_node = std::to_string(gpus_per_node) + " " + device->name;
  return nodes > 1 ? std::to_string(nodes) + " nodes × " + per_node : per_node;
}

DeviceCount parse_devices(const std::string& text) {
  const Where where{"", "", "--devices"};
  std::string known;
  for (const DeviceKind& k : device_kinds()) known += std::string(known.empty() ? "" : ", ") + k.name;
  const std::string t = upper(text);
  const size_t x = t.find('X');
  DeviceCount out;
  std::string kind = t;
  if (x != std::string::npos && x > 0) {
    const std::string digits = t.substr(0, x);
    if (digits.size() > 3 || digits.find_first_not_of("0123456789") != std::string::npos) {
      throw Error(where, "'" + text + "' is not COUNTxKIND (e.g. 8xH200)");
    }
    out.count = std::stoll(digits);
    kind = t.substr(x + 1);
    if (out.count < 1 || out.count > kMaxDevicesPerNode) {
      throw Error(where, "'" + text + "': the count must be in [1, " + std::to_string(kMaxDevicesPerNode) + "]");
    }
  }
  for (const DeviceKind& k : device_kinds()) {
    if (kind == k.name) out.kind = &k;
  }
  if (!out.kind) throw Error(where, "'" + text + "' names no known device kind (known: " + known + ")");
  return out;
}

}  // namespace k3
