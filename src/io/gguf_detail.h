// Constants shared by the GGUF reader (gguf.cpp) and writers (gguf_writer.cpp).
#pragma once

#include <cstdint>

namespace k3::gguf_detail {

inline constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
inline constexpr uint32_t kMaxDims = 4;
inline constexpr const char* kAlignmentKey = "general.alignment";

}  // namespace k3::gguf_detail
