#include "backend/cpu/kernels/cpu_isa.h"

#include <cstdlib>

#include "core/error.h"

namespace k3::cpu {

const char* isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::Scalar: return "scalar";
    case CpuIsa::Avx2: return "avx2";
    case CpuIsa::Avx512: return "avx512";
  }
  return "?";
}

CpuIsa host_isa() {
  static const CpuIsa isa = [] {
    __builtin_cpu_init();
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                        __builtin_cpu_supports("avx512vnni");
    if (avx512) return CpuIsa::Avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return CpuIsa::Avx2;
    return CpuIsa::Scalar;
  }();
  return isa;
}

std::vector<CpuIsa> runnable_isas() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : {CpuIsa::Scalar, CpuIsa::Avx2, CpuIsa::Avx512}) {
    if (static_cast<int>(isa) <= static_cast<int>(host_isa())) out.push_back(isa);
  }
  return out;
}

CpuIsa selected_isa() {
  const char* env = std::getenv("K3_CPU_ISA");
  if (env == nullptr || *env == '\0') return host_isa();
  const std::string want = env;
  for (CpuIsa isa : {CpuIsa::Scalar, CpuIsa::Avx2, CpuIsa::Avx512}) {
    if (want != isa_name(isa)) continue;
    if (static_cast<int>(isa) > static_cast<int>(host_isa())) {
      throw Error(Where{"", "K3_CPU_ISA", want}, std::string("this CPU does not support ") + want + " (best: " +
                                                     isa_name(host_isa()) + ")");
    }
    return isa;
  }
  throw Error(Where{"", "K3_CPU_ISA", want}, "unknown ISA '" + want + "' (expected scalar, avx2 or avx512)");
}

}  // namespace k3::cpu
