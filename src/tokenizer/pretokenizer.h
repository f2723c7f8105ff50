// Regex pre-tokenization with PCRE2 (UTF + UCP, JIT): the text is cut into the matches of the
// pattern, scanned left to right like Rust's find_iter (text no match covers is dropped, as in
// tiktoken; the Kimi pattern covers every code point).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace k3 {

// The Kimi (K2/K3/Kimi-Linear) pattern rewritten for PCRE2 as in the tokenizer spec §2.3: class
// intersections as lookaheads, and \p{sc:Han} (Script=Han) because PCRE2 ≥ 10.40 reads a bare
// \p{Han} as Script_Extensions. PCRE2's Unicode tables (10.42: Unicode 14) are older than the
// reference's (Unicode 16): code points assigned since then split differently.
const std::string& kimi_pattern();

class Pretokenizer {
 public:
  // Throws k3::Error naming the offset when PCRE2 rejects the pattern.
  explicit Pretokenizer(const std::string& pattern);
  ~Pretokenizer();
  Pretokenizer(Pretokenizer&&) noexcept;
  Pretokenizer& operator=(Pretokenizer&&) noexcept;

  // Calls piece(match) for every match in text, which must be valid UTF-8.
  void split(std::string_view text, const std::function<void(std::string_view)>& piece) const;
  std::vector<std::string_view> split(std::string_view text) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Impl;
  std::string pattern_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace k3
