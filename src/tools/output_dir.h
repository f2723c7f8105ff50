// What the commands that write checkpoints (k3 quantize, k3 make-headers) share: the rule for their
// --out folder and how they print sizes.
#pragma once

#include <cstdint>
#include <string>

namespace k3::cli {

// --out: absent, or an empty folder. Throws k3::Error (field '--out') otherwise.
void check_new_output_dir(const std::string& out);

// Decimal units: "512 B", "3.4 KB", "12.0 MB", "1.53 GB".
std::string size_text(uint64_t bytes);

}  // namespace k3::cli
