// Which SIMD instruction sets the CPU kernels may use. Chosen once per process from the host CPU
// (cpuid), capped by K3_CPU_ISA=scalar|avx2|avx512 (tests and benchmarks run every tier the host
// has). Kernels come in tiers compiled as separate translation units (*_avx2.cpp, *_avx512.cpp,
// built with their -m flags); only the tier selected here is ever called.
#pragma once

#include <string>
#include <vector>

namespace k3::cpu {

enum class CpuIsa {
  Scalar,  // portable C++ (baseline x86-64)
  Avx2,    // AVX2 + FMA + F16C
  Avx512,  // AVX-512 F/BW/VL/DQ + VNNI (Cascade Lake, Ice Lake, Sapphire Rapids, Zen 4 and later)
};

const char* isa_name(CpuIsa isa);
// The best tier this CPU supports.
CpuIsa host_isa();
// The tier kernels use: host_isa(), or K3_CPU_ISA if set (an unknown name or a tier the host
// lacks is a k3::Error naming the variable).
CpuIsa selected_isa();
// Every tier this host can run, lowest first (for tests that compare tiers).
std::vector<CpuIsa> runnable_isas();

}  // namespace k3::cpu
