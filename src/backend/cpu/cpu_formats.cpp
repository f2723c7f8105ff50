// The table of CPU bindings, one per entry of K3_SCHEME_LIST (each defined in its format folder).
#include "backend/cpu/cpu_format.h"

namespace k3::cpu {

const CpuFormat& cpu_format(SchemeKind kind) {
  switch (kind) {
#define K3_CPU_FORMAT_CASE(Kind, name) \
  case SchemeKind::Kind:               \
    return cpu_format_##name;
    K3_SCHEME_LIST(K3_CPU_FORMAT_CASE)
#undef K3_CPU_FORMAT_CASE
  }
  static const CpuFormat none;  // not a scheme: no fast form
  return none;
}

}  // namespace k3::cpu
