// std::filesystem errors as k3::Error: "PATH: too many levels of symbolic links" instead of the
// library's "filesystem error: status: ... [PATH]".
#pragma once

#include <cctype>
#include <filesystem>
#include <string>

#include "core/error.h"

namespace k3 {

inline Error path_error(const std::filesystem::filesystem_error& e, const std::string& fallback_path = "") {
  std::string message = e.code().message();
  if (!message.empty()) message[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(message[0])));
  std::string path = e.path1().empty() ? fallback_path : e.path1().string();
  if (!e.path2().empty()) message += " (" + e.path2().string() + ")";
  return Error(Where{path, "", ""}, message);
}

}  // namespace k3
