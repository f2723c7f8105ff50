// Helpers shared by the safetensors reader (safetensors.cpp) and writer (safetensors_writer.cpp).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/error.h"

namespace k3::safetensors_detail {

// "[a, b, c]".
std::string shape_string(std::span<const uint64_t> shape);

// Offset of the first byte that does not start a well-formed UTF-8 sequence (no overlongs,
// surrogates or code points above U+10FFFF), or npos when all of s is valid.
size_t first_invalid_utf8(std::span<const uint8_t> s);

// JSON text must be valid UTF-8 without NUL bytes (nlohmann's lexer would take a NUL for the end
// of input and ignore what follows).
void require_text(std::span<const uint8_t> text, const Where& where, const std::string& what);

}  // namespace k3::safetensors_detail
