// ECMAScript regular expressions (the JSON Schema `pattern` dialect), subset: literals, `.`,
// classes with ranges and \d \w \s \D \W \S, escapes (\n \t \xHH \uHHHH \u{H..}), groups ( ) and
// (?: ), alternation, quantifiers * + ? {n} {n,} {n,m} (lazy forms match the same strings), and
// ^ / $ at the ends. Backreferences, lookaround, word boundaries and named groups are refused.
#pragma once

#include <string_view>

#include "grammar/grammar_ir.h"

namespace k3::grammar {

struct RegexExpr {
  Expr expr;              // over code points of the decoded string
  bool anchored_start = false;
  bool anchored_end = false;
};

// Throws k3::Error "regex: OFFSET: message".
RegexExpr parse_regex(std::string_view pattern);

}  // namespace k3::grammar
