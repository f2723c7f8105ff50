// Errors carry where they happened: file, tensor and field. The CLI prints what() on one line
// and exits 1; nothing below the CLI prints or exits.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace k3 {

struct Where {
  std::string file;
  std::string tensor;
  std::string field;
};

class Error : public std::runtime_error {
 public:
  Error(const Where& where, const std::string& message);
  explicit Error(const std::string& message) : Error(Where{}, message) {}

  const Where& where() const { return where_; }
  // The message without the location prefix.
  const std::string& detail() const { return detail_; }

 private:
  Where where_;
  std::string detail_;
};

// Input bytes quoted for an error message: 'TEXT' with control bytes, DEL, bytes that are not
// valid UTF-8, '\'' and '\\' written as \xNN (so a NUL or newline in a file cannot cut or split the
// one-line message), at most max_bytes of the input followed by "..." when longer.
std::string quote_bytes(std::string_view bytes, size_t max_bytes = 64);

// A number for an error message: %g, six significant digits (bounds such as DBL_MAX stay short).
std::string short_number(double value);

// Formats "file: tensor 'T': field 'F': message", leaving out the parts that are empty.
std::string format_error(const Where& where, const std::string& message);

}  // namespace k3
