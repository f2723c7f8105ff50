// The machines a placement is planned for (`k3 check --devices`): device kinds, links and the
// host, as named constants in this one place, each with its source. "Achievable" rates are what
// the roofline (parallel/roofline.h) divides by; datasheet peaks are kept beside them for the reader.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace k3 {

struct DeviceKind {
  const char* name;             // as --devices spells it: "H200"
  uint64_t memory_bytes;        // what one device offers a process (cudaMemGetInfo's total)
  double hbm_peak_bps;          // datasheet HBM bandwidth, bytes/s
  double hbm_read_bps;          // achievable HBM read rate the roofline uses
  double bf16_flops;            // achievable dense bf16 tensor-core rate the roofline uses
  double nvlink_bps;            // achievable NVLink rate per GPU and direction
  double pcie_bps;              // achievable host↔device rate per GPU and direction
};

// Every kind --devices accepts (H200, H100 SXM).
const std::vector<DeviceKind>& device_kinds();

// InfiniBand NDR, one 400 Gb/s port per GPU: 50 GB/s per direction on the wire. The roofline uses
// 45 GB/s (90 %; an assumption: RDMA writes of ≥ 64 KB reach ~90 % of the line rate).
inline constexpr double kInfinibandPeakBps = 50e9;
inline constexpr double kInfinibandBps = 45e9;

// Host memory bandwidth per node that CPU-computed experts (and host→device copies, which read the
// same DRAM) share, when --cpu-bandwidth is not given: an assumption of half the 614 GB/s peak of
// two sockets × 8 channels of DDR5-4800 (8 B × 4.8 GT/s = 38.4 GB/s a channel), for NUMA-spread
// expert GEMVs.
inline constexpr double kDefaultCpuBandwidthBps = 300e9;

// Device memory every GPU keeps out of the plan: the CUDA context, cuBLASLt and NCCL workspaces,
// one prefill chunk's activations and scratch (an assumption; k3's arena default --gpu-memory 90 %
// leaves 14 GiB of an H200).
inline constexpr uint64_t kRuntimeReserveBytes = uint64_t{6} << 30;

// Fixed cost of one collective at decode sizes (kilobytes), on top of its bytes ÷ bandwidth: an
// assumption of the order NCCL / DeepEP-style kernels show for small messages (launch, signalling,
// synchronisation): within a node over NVLink, and an all-to-all that crosses InfiniBand.
inline constexpr double kIntraNodeCollectiveSeconds = 10e-6;
inline constexpr double kInterNodeCollectiveSeconds = 25e-6;
// One host round trip per MoE layer when experts are streamed or computed on the CPU (the router's
// picks copied to the host, as k3's expert streaming does; an assumption).
inline constexpr double kHostRoundTripSeconds = 10e-6;

struct Machine {
  const DeviceKind* device = nullptr;
  int64_t gpus_per_node = 1;
  int64_t nodes = 1;
  uint64_t host_bytes = 0;  // per node: host memory routed experts may take (pinned, or CPU-computed)
  bool cpu_experts = false; // experts that do not fit on the GPUs are computed by the CPU, not streamed
  double cpu_bps = kDefaultCpuBandwidthBps;  // host memory bandwidth per node
  double network_bps = kInfinibandBps;       // per GPU and direction, between nodes

  int64_t gpus() const { return gpus_per_node * nodes; }
  std::string describe() const;  // "2 nodes × 8 H200", "8 H200", "1 H200"
};

// --devices: "8xH200", "H200" (one), case-insensitive kind, count in [1, kMaxDevicesPerNode].
// Throws k3::Error (field '--devices') naming the text and the known kinds.
inline constexpr int64_t kMaxDevicesPerNode = 64;
struct DeviceCount {
  int64_t count = 1;
  const DeviceKind* kind = nullptr;
};
DeviceCount parse_devices(const std::string& text);

}  // namespace k3
