// JSON Schema → grammar (docs/structured-outputs.md lists the supported subset), the generic JSON
// grammars, and a validator over the same subset.
//
// Every document the grammar allows validates against the schema; the grammar may allow fewer
// documents than the schema (no properties beyond those declared unless additionalProperties
// says so, at most 16 integer and 16 fraction digits, no \u escapes of surrogates, whitespace
// per JsonWhitespace). A keyword that would change validity and is not supported is refused with
// "json schema #/POINTER: message"; annotations (title, description, default, examples, ...)
// are ignored.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "grammar/grammar_ir.h"

namespace k3::grammar {

using OrderedJson = nlohmann::ordered_json;

enum class JsonWhitespace {
  kCompact,  // no whitespace at all
  kBounded,  // between tokens: nothing, one space, or a newline and up to 20 spaces / tabs
};

struct JsonSchemaOptions {
  JsonWhitespace whitespace = JsonWhitespace::kBounded;
};

// Property order follows the schema text, hence ordered_json.
Grammar json_schema_to_grammar(const OrderedJson& schema, const JsonSchemaOptions& options = {});
// Parses the text first (errors name "json schema").
Grammar json_schema_to_grammar(std::string_view schema_text, const JsonSchemaOptions& options = {});

// Any JSON object (response_format json_object) / any JSON value.
Grammar json_object_grammar(const JsonSchemaOptions& options = {});
Grammar json_value_grammar(const JsonSchemaOptions& options = {});

// "" when `value` validates against `schema` (same subset; `pattern` with PCRE2, formats as the
// grammar generates them: date, time, date-time, uuid, email, ipv4), else the first violation
// with the instance path, e.g. "/items/2: 7 is above the maximum 5".
std::string json_schema_violation(const OrderedJson& value, const OrderedJson& schema);

}  // namespace k3::grammar
