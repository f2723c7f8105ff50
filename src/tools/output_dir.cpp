#include "tools/output_dir.h"

#include <cstdio>
#include <filesystem>

#include "core/error.h"

namespace k3::cli {
namespace fs = std::filesystem;

void check_new_output_dir(const std::string& out) {
  const fs::file_status st = fs::status(out);
  if (!fs::exists(st)) return;
  if (!fs::is_directory(st)) throw Error(Where{out, "", "--out"}, "exists and is not a directory");
  if (!fs::is_empty(out)) throw Error(Where{out, "", "--out"}, "exists and is not empty; refusing to write into it");
}

std::string size_text(uint64_t bytes) {
  char buf[32];
  if (bytes < 1000) return std::to_string(bytes) + " B";
  if (bytes < 1000 * 1000) std::snprintf(buf, sizeof(buf), "%.1f KB", bytes / 1e3);
  else if (bytes < uint64_t{1000} * 1000 * 1000) std::snprintf(buf, sizeof(buf), "%.1f MB", bytes / 1e6);
  else std::snprintf(buf, sizeof(buf), "%.2f GB", bytes / 1e9);
  return buf;
}

}  // namespace k3::cli
