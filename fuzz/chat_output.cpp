// Fuzzes the chat output parsers (Kimi-K3 and Kimi-Linear) with their chunking invariant: the
// reply is parsed whole and again cut at fuzzer-chosen points; the messages, and the deltas joined
// as a client joins them, must be identical, every field valid UTF-8, and with no '<' in the
// ordinary text no field may hold one (so no marker name leaks), and only a cut leaves a call
// incomplete (the last one). Aborts on any violation.
//
// Input: byte 0 = flags (bit 0 thinking, bit 1 ended by a stop token, bit 2 Kimi-Linear, bit 3
// text mode), bytes 1-2 = the cut seed, then the reply. Text mode: the reply is text with marker
// names spelled out, fed through feed(). Piece mode: a byte below the format's marker count is
// that marker, every other byte is ordinary text (as ids are fed).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "chat/k3_format.h"
#include "chat/kimi_linear_format.h"
#include "chat/output_parsers.h"
#include "tokenizer/utf8.h"

namespace {

using k3::chat::OutputParser;
using k3::chat::ParsedMessage;

struct Options {
  bool thinking, ended, k3, text;
};

// Cut before byte i when this says so (`seed` 0: never; 1: everywhere).
bool cut_at(size_t i, uint32_t seed) {
  if (seed <= 1) return seed == 1;
  return ((i * 2654435761u) ^ seed) % (seed % 7 + 2) == 0;
}

std::string parse(const Options& o, std::string_view reply, uint32_t seed) {
  const std::unique_ptr<OutputParser> p = k3::chat::make_output_parser(o.k3, o.thinking);
  ParsedMessage joined;
  const size_t markers = p->marker_names().size();
  std::string pending;
  auto flush = [&] {
    if (!pending.empty()) joined.add(o.text ? p->feed(pending) : p->text(pending));
    pending.clear();
  };
  for (size_t i = 0; i < reply.size(); ++i) {
    if (cut_at(i, seed)) flush();
    const auto b = static_cast<unsigned char>(reply[i]);
    if (!o.text && b < markers) {
      flush();
      joined.add(p->marker(b));
    } else {
      pending += reply[i];
    }
  }
  flush();
  joined.add(p->finish(o.ended));
  ParsedMessage m = p->message();
  joined.finish_reason = m.finish_reason;
  if (joined.to_json() != m.to_json()) __builtin_trap();  // the message is the joined deltas
  auto check = [&](const std::string& field) {
    if (k3::utf8::first_invalid(field) != std::string::npos) __builtin_trap();
    if (!o.text && reply.find('<') == std::string_view::npos && field.find('<') != std::string::npos) __builtin_trap();
  };
  check(m.content.value_or(""));
  check(m.reasoning_content.value_or(""));
  for (const auto& c : m.tool_calls) {
    check(c.name);
    check(c.arguments);
    if (c.id.empty()) __builtin_trap();
    // Only a cut can leave a call incomplete, and only the last one.
    if (!c.complete && (m.finish_reason != "length" || &c != &m.tool_calls.back())) __builtin_trap();
  }
  return m.to_json().dump() + m.finish_reason;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const Options o{(data[0] & 1) != 0, (data[0] & 2) != 0, (data[0] & 4) == 0, (data[0] & 8) != 0};
  const uint32_t seed = data[1] | data[2] << 8;
  const std::string_view reply(reinterpret_cast<const char*>(data + 3), size - 3);
  const std::string whole = parse(o, reply, 0);
  if (parse(o, reply, seed) != whole) __builtin_trap();
  if (reply.size() <= 4096 && parse(o, reply, 1) != whole) __builtin_trap();  // every byte apart
  return 0;
}
