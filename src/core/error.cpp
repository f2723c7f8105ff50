#include "core/error.h"

namespace k3 {

std::string format_error(const Where& where, const std::string& message) {
  std::string out;
  auto append = [&out](const std::string& part) {
    if (!out.empty()) out += ": ";
    out += part;
  };
  if (!where.file.empty()) append(where.file);
  if (!where.tensor.empty()) append("tensor '" + where.tensor + "'");
  if (!where.field.empty()) append("field '" + where.field + "'");
  append(message);
  return out;
}

Error::Error(const Where& where, const std::string& message)
    : std::runtime_error(format_error(where, message)), where_(where), detail_(message) {}

}  // namespace k3
