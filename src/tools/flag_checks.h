// CLI11 validators for numeric and named flags. A failed check is a usage error (exit 2) whose
// message names the value and short bounds: "--threads: 100000 is out of range [0, 64]".
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <string>

namespace k3::cli {

// A decimal integer in [lo, hi]: no fraction, exponent, sign on a non-negative range, or overflow.
CLI::Validator integer_in(int64_t lo, int64_t hi, const std::string& note = "");
// A decimal integer in [0, 2^64 − 1].
CLI::Validator unsigned_integer();
// A finite decimal number in (lo, hi] when lo_open, else [lo, hi].
CLI::Validator real_in(double lo, bool lo_open, double hi);
// Runs `parse` (which throws k3::Error on a bad value) on the flag's text; the error's detail is the
// message. For named values (families, architectures, sizes).
CLI::Validator parsed_by(std::function<void(const std::string&)> parse);

}  // namespace k3::cli
