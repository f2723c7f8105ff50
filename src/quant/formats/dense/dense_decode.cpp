#include "quant/formats/dense/dense_decode.h"

#include <cstring>
#include <string>

#include "core/numeric.h"

namespace k3 {

bool dense_dtype_decodable(Dtype dtype) {
  switch (dtype) {
    case Dtype::F6_E2M3:
    case Dtype::F6_E3M2:
    case Dtype::F8_E4M3FNUZ:
    case Dtype::F8_E5M2FNUZ:
    case Dtype::C64:
      return false;
    default:
      return true;
  }
}

namespace {
template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <class T, class F>
void decode_each(const uint8_t* src, float* out, uint64_t n, F&& to_float) {
  for (uint64_t i = 0; i < n; ++i) out[i] = to_float(load<T>(src + i * sizeof(T)));
}
}  // namespace

void decode_dense(Dtype dtype, std::span<const uint8_t> bytes, float* out, uint64_t n, const Where& where) {
  if (!dense_dtype_decodable(dtype)) {
    throw Error(where, "dtype " + std::string(dtype_name(dtype)) + " has no float decoding");
  }
  const uint64_t expected = dtype == Dtype::F4 ? (n + 1) / 2 : n * dtype_size_bytes(dtype);
  if (bytes.size() != expected) {
    throw Error(where, "payload has " + std::to_string(bytes.size()) + " bytes, " + std::to_string(n) + " " +
                           std::string(dtype_name(dtype)) + " elements need " + std::to_string(expected));
  }
  const uint8_t* p = bytes.data();
  auto cast = [](auto v) { return static_cast<float>(v); };
  switch (dtype) {
    case Dtype::BOOL: decode_each<uint8_t>(p, out, n, [](uint8_t v) { return v ? 1.0f : 0.0f; }); break;
    case Dtype::U8: decode_each<uint8_t>(p, out, n, cast); break;
    case Dtype::I8: decode_each<int8_t>(p, out, n, cast); break;
    case Dtype::I16: decode_each<int16_t>(p, out, n, cast); break;
    case Dtype::U16: decode_each<uint16_t>(p, out, n, cast); break;
    case Dtype::I32: decode_each<int32_t>(p, out, n, cast); break;
    case Dtype::U32: decode_each<uint32_t>(p, out, n, cast); break;
    case Dtype::I64: decode_each<int64_t>(p, out, n, cast); break;
    case Dtype::U64: decode_each<uint64_t>(p, out, n, cast); break;
    case Dtype::F16: decode_each<uint16_t>(p, out, n, [](uint16_t v) { return decode_f16(v); }); break;
    case Dtype::BF16: decode_each<uint16_t>(p, out, n, [](uint16_t v) { return decode_bf16(v); }); break;
    case Dtype::F32: std::memcpy(out, p, n * sizeof(float)); break;
    case Dtype::F64: decode_each<double>(p, out, n, cast); break;
    case Dtype::F8_E4M3: decode_each<uint8_t>(p, out, n, [](uint8_t v) { return decode_e4m3fn(v); }); break;
    case Dtype::F8_E5M2: decode_each<uint8_t>(p, out, n, [](uint8_t v) { return decode_e5m2(v); }); break;
    case Dtype::F8_E8M0: decode_each<uint8_t>(p, out, n, [](uint8_t v) { return decode_ue8m0(v); }); break;
    case Dtype::F4:
      for (uint64_t i = 0; i < n; ++i) out[i] = decode_e2m1((p[i / 2] >> ((i & 1) * 4)) & 0xF);
      break;
    default: break;  // excluded by dense_dtype_decodable
  }
}

}  // namespace k3
