// Host <-> device copies for load time and tests: each allocates its destination in an Arena,
// converts on the host where the formats differ, and returns when the data is on the device (so a
// kernel on any stream may read it). Not for per-token use. Host-only header.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cuda/core/arena.h"
#include "backend/cuda/core/tensor.h"

namespace k3::cuda {

// float host matrix -> device f32 or bf16 (RNE, core/numeric.h encode_bf16).
DeviceTensor upload_f32(Arena& arena, const float* host, int64_t rows, int64_t cols, DType to, const char* what);
// bf16 bit patterns as stored in checkpoints.
DeviceTensor upload_bf16_bits(Arena& arena, const uint16_t* host, int64_t rows, int64_t cols, const char* what);
// Raw bytes (e4m3 codes, u8) of a [rows, cols] matrix.
DeviceTensor upload_bytes(Arena& arena, const uint8_t* host, int64_t rows, int64_t cols, DType as, const char* what);

// Raw host -> device copy that has landed when it returns.
void copy_bytes_to_device(void* dst, const void* src, size_t bytes);

// Copies into an existing device tensor (same element count; rows contiguous on both sides).
void copy_to_device(const float* host, const DeviceTensor& dst);

// Device -> host, every element as float (f32, bf16 and e4m3 are decoded; i32 converted).
std::vector<float> download_f32(const DeviceTensor& t);
// Device -> host raw bytes of a contiguous tensor.
std::vector<uint8_t> download_bytes(const DeviceTensor& t);
std::vector<int32_t> download_i32(const DeviceTensor& t);

// Fills the tensor's rows with 0xFF bytes (NaN for f32/bf16/e4m3): tests poison outputs with it
// and then check that every element was written.
void poison(const DeviceTensor& t);

}  // namespace k3::cuda
