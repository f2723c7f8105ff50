#include "tools/flag_checks.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

#include "core/error.h"

namespace k3::cli {
CLI::Validator integer_in(int64_t lo, int64_t hi, const std::string& note) {
  const std::string bounds = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return CLI::Validator(
      [lo, hi, bounds, note](std::string& text) -> std::string {
        int64_t v = 0;
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data(), end, v);
        const bool digits = !text.empty() && ptr == end && (text[0] != '-' || lo < 0);
        if (ec == std::errc() && digits && v >= lo && v <= hi) return {};
        const std::string what = ec == std::errc::result_out_of_range || (ec == std::errc() && digits)
                                     ? "'" + text + "' is out of range " + bounds
                                     : "'" + text + "' is not an integer in " + bounds;
        return what + (note.empty() ? "" : " (" + note + ")");
      },
      bounds);
}

CLI::Validator unsigned_integer() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        uint64_t v = 0;
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data(), end, v);
        if (!text.empty() && ec == std::errc() && ptr == end) return {};
        return "'" + text + "' is not an integer in [0, " + std::to_string(std::numeric_limits<uint64_t>::max()) + "]";
      },
      "");
}

CLI::Validator real_in(double lo, bool lo_open, double hi) {
  const std::string bounds = (lo_open ? "(" : "[") + short_number(lo) + ", " + short_number(hi) + "]";
  return CLI::Validator(
      [lo, lo_open, hi, bounds](std::string& text) -> std::string {
        double v = 0;
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data(), end, v);
        const bool number = !text.empty() && ec == std::errc() && ptr == end && std::isfinite(v);
        if (number && (lo_open ? v > lo : v >= lo) && v <= hi) return {};
        return "'" + text + "' is not a number in " + bounds;
      },
      bounds);
}

CLI::Validator parsed_by(std::function<void(const std::string&)> parse) {
  return CLI::Validator(
      [parse](std::string& text) -> std::string {
        try {
          parse(text);
        } catch (const Error& e) {
          return e.detail();
        }
        return {};
      },
      "");
}

}  // namespace k3::cli
