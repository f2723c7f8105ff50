// NumPy .npy files (format versions 1.0, 2.0 and 3.0 read; 1.0 written, 2.0 only if the header
// would not fit 1.0's 16-bit length). Little-endian, C order only. Supported dtypes:
// "<f2" "<f4" "<f8" "<i4" "<i8" "|u1".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace k3 {

struct NpyArray {
  std::string dtype;            // one of the supported descr strings, e.g. "<f4"
  std::vector<uint64_t> shape;  // slowest-varying first; empty = 0-d scalar
  std::vector<uint8_t> data;    // element bytes, C order, little-endian

  uint64_t numel() const;
};

// Bytes per element of a supported dtype; throws k3::Error (field 'descr') otherwise.
size_t npy_itemsize(const std::string& dtype);

// Parses a whole .npy image. Every problem (bad magic, unsupported version, truncated header,
// malformed header dict, unknown dtype, Fortran order, data size mismatch) throws k3::Error whose
// file is `name_for_errors` and whose field names the part at fault.
NpyArray parse_npy(const uint8_t* p, size_t n, const std::string& name_for_errors);
NpyArray read_npy(const std::string& path);

// Serializes to a .npy image whose data starts at a multiple of 64 bytes. `nbytes` must equal
// numel(shape) * itemsize(dtype); a mismatch or an unsupported dtype throws.
std::vector<uint8_t> serialize_npy(const std::string& dtype, const std::vector<uint64_t>& shape, const void* data,
                                   size_t nbytes);
void write_npy(const std::string& path, const std::string& dtype, const std::vector<uint64_t>& shape,
               const void* data, size_t nbytes);
void write_npy_f32(const std::string& path, const std::vector<uint64_t>& shape, const float* data);

}  // namespace k3
