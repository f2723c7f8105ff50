// Fuzzes the grammar front ends: GBNF text (its text form must read back to itself and lower), JSON
// Schema → grammar (and lowering), and the `pattern` regex parser. The first byte picks the parser;
// any input must either succeed or throw k3::Error.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "grammar/flat_grammar.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (data[0] % 3) {
      case 0: {
        const k3::grammar::Grammar g = k3::grammar::parse_gbnf(text);
        const std::string printed = g.to_gbnf();
        if (k3::grammar::parse_gbnf(printed).to_gbnf() != printed) __builtin_trap();
        k3::grammar::lower_grammar(g);
        break;
      }
      case 1:
        k3::grammar::lower_grammar(k3::grammar::json_schema_to_grammar(text));
        break;
      default:
        k3::grammar::parse_regex(text);
    }
  } catch (const k3::Error&) {
  }
  return 0;
}
