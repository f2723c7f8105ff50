// Internal to src/grammar: the pieces of the JSON Schema translator (json_schema.h) that build
// the grammar of one JSON string or number. Helpers throw k3::Error with a message only; the
// translator adds the schema pointer.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "grammar/grammar_ir.h"

namespace k3::grammar::schema_detail {

// One character of a JSON string body: a plain character or an escape (never a \u surrogate).
Expr json_string_char();
// A whole JSON string, quotes included, of min..max characters (max may be Expr::kUnbounded).
Expr json_string(uint32_t min, uint32_t max);
// A string in a supported `format` (date, time, date-time, uuid, email, ipv4), quotes included.
// Throws for other formats.
Expr json_format_string(std::string_view format);
// A string matching the ECMAScript `pattern` (search semantics unless anchored), quotes included.
Expr json_pattern_string(std::string_view pattern);
// `decoded` (an expression over the characters of the decoded string) as JSON string body text.
Expr encode_json_string_body(const Expr& decoded);

// The largest magnitude the number grammars generate: 16 digits.
inline constexpr int64_t kMaxGeneratedInteger = 9'999'999'999'999'999;
// Integers in [lo, hi] (either bound open), no leading zeros, "-0" never. Throws when empty.
Expr json_integer(std::optional<int64_t> lo, std::optional<int64_t> hi);
// Numbers in [lo, hi] (integer bounds, either open). Unbounded: fraction and exponent allowed;
// bounded: integer part and optional fraction, no exponent.
Expr json_number(std::optional<int64_t> lo, std::optional<int64_t> hi);

}  // namespace k3::grammar::schema_detail
