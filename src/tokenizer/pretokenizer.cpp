#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pretokenizer.h"

#include <pcre2.h>

#include "core/error.h"

namespace k3 {

// The reference's \s is Unicode White_Space. PCRE2's \s (with UCP) also matches U+180E, which
// is not White_Space, so the pattern spells the class out (spec §2.3); \S is its complement.
#define K3_WHITE_SPACE R"(\t\n\x0B\f\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})"

const std::string& kimi_pattern() {
  static const std::string pattern =
      R"(\p{sc:Han}+)"
      R"(|[^\r\n\p{L}\p{N}]?(?:(?!\p{sc:Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])*(?:(?!\p{sc:Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
      R"(|[^\r\n\p{L}\p{N}]?(?:(?!\p{sc:Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])+(?:(?!\p{sc:Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
      R"(|\p{N}{1,3})"
      R"(| ?[^)" K3_WHITE_SPACE R"(\p{L}\p{N}]+[\r\n]*)"
      R"(|[)" K3_WHITE_SPACE R"(]*[\r\n]+)"
      R"(|[)" K3_WHITE_SPACE R"(]+(?![^)" K3_WHITE_SPACE R"(]))"
      R"(|[)" K3_WHITE_SPACE R"(]+)";
  return pattern;
}

#undef K3_WHITE_SPACE

struct Pretokenizer::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Impl() {
    if (code) pcre2_code_free(code);
  }
};

namespace {

// One match data block and JIT stack per thread and pattern use; the JIT stack grows on demand so
// long whitespace/letter runs never hit the default 32 KiB limit.
struct ThreadState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  ThreadState() {
    data = pcre2_match_data_create(4, nullptr);
    context = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(64 * 1024, 256 * 1024 * 1024, nullptr);
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~ThreadState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

Pretokenizer::Pretokenizer(const std::string& pattern) : pattern_(pattern), impl_(std::make_unique<Impl>()) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                              &err, &offset, nullptr);
  if (!impl_->code) {
    throw Error(Where{"", "", "pattern"},
                "PCRE2 rejects the pre-tokenizer pattern at offset " + std::to_string(offset) + ": " + pcre2_message(err));
  }
  impl_->jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE) == 0;
}

Pretokenizer::~Pretokenizer() = default;
Pretokenizer::Pretokenizer(Pretokenizer&&) noexcept = default;
Pretokenizer& Pretokenizer::operator=(Pretokenizer&&) noexcept = default;

void Pretokenizer::split(std::string_view text, const std::function<void(std::string_view)>& piece) const {
  thread_local ThreadState state;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    const int rc = impl_->jit
                       ? pcre2_jit_match(impl_->code, subject, text.size(), pos, 0, state.data, state.context)
                       : pcre2_match(impl_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, state.data, state.context);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) throw Error(Where{"", "", "pattern"}, "PCRE2 match failed: " + pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(state.data);
    if (ov[1] > ov[0]) {
      piece(text.substr(ov[0], ov[1] - ov[0]));
      pos = ov[1];
    } else {  // empty match: step over one code point
      pos = ov[1] + 1;
      while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
    }
  }
}

std::vector<std::string_view> Pretokenizer::split(std::string_view text) const {
  std::vector<std::string_view> out;
  split(text, [&](std::string_view p) { out.push_back(p); });
  return out;
}

}  // namespace k3
