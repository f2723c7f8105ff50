// Fuzzes the .npy parser: any input either throws k3::Error or parses into an array that
// serializes and parses back to the same dtype, shape and bytes.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "io/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  k3::NpyArray a;
  try {
    a = k3::parse_npy(data, size, "fuzz.npy");
  } catch (const k3::Error&) {
    return 0;
  }
  const std::vector<uint8_t> again = k3::serialize_npy(a.dtype, a.shape, a.data.data(), a.data.size());
  const k3::NpyArray b = k3::parse_npy(again.data(), again.size(), "fuzz-roundtrip.npy");
  if (b.dtype != a.dtype || b.shape != a.shape || b.data != a.data) __builtin_trap();
  return 0;
}
