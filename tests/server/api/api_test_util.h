// The API tests' model context: the make-tiny tokenizer (byte tokens plus the named specials) and
// the tiny config of either architecture.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/tiny_config.h"
#include "server/api/openai_request.h"
#include "server/api_error.h"
#include "tokenizer/tiny_vocab.h"
#include "tokenizer/tokenizer.h"

namespace k3::server::test {

inline constexpr int64_t kMaxContext = 1024;

struct TinyApi {
  const Tokenizer& tokenizer;
  const K3Config& config;
  ApiContext ctx;
};

// One per architecture for the whole test binary.
inline const TinyApi& tiny_api(TinyArch arch = TinyArch::KimiK3) {
  static const TinyApi* apis[2] = {nullptr, nullptr};
  const TinyApi*& slot = apis[arch == TinyArch::KimiK3 ? 0 : 1];
  if (!slot) {
    const std::string name = arch == TinyArch::KimiK3 ? "k3" : "linear";
    const std::string dir = ::testing::TempDir() + "/k3_api_tokenizer_" + name;
    std::filesystem::create_directories(dir);
    auto* config = new K3Config(parse_k3_config(parse_json(tiny_config_json(arch, TinySize::Tiny).dump(), dir + "/config.json")));
    write_tiny_tokenizer(dir, static_cast<uint32_t>(config->vocab_size) - Tokenizer::kNumSpecials);
    auto* tokenizer = new Tokenizer(Tokenizer::load(dir));
    slot = new TinyApi{*tokenizer, *config, ApiContext{*tokenizer, *config, "tiny", kMaxContext}};
  }
  return *slot;
}

// The tiny Kimi-K3 API's tokenizer and its first end-of-sequence id.
inline const Tokenizer& tok() { return tiny_api().tokenizer; }
inline int64_t eos() { return tiny_api().config.tokens.eos.at(0); }

inline std::vector<int64_t> ids_of(const Tokenizer& t, std::string_view text) {
  const std::vector<uint32_t> ids = t.encode(text, Specials::kAll);
  return {ids.begin(), ids.end()};
}

// The ApiError `call` throws (status 0 when none).
inline ApiError api_error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const ApiError& e) {
    return e;
  }
  return ApiError(0, "no error");
}

// A refused request: its fields, and the error expected.
struct Bad {
  std::string fields;
  std::string param;
  int status = 400;
  std::string code = "";
};

// Each case parsed by `parse` is refused with its status, param (named in the message) and code.
inline void expect_refused(const std::function<void(const std::string&)>& parse, const std::vector<Bad>& cases) {
  for (const Bad& c : cases) {
    const ApiError e = api_error_of([&] { parse(c.fields); });
    EXPECT_EQ(e.status(), c.status) << c.fields << " → " << e.what();
    EXPECT_EQ(e.param(), c.param) << c.fields << " → " << e.what();
    EXPECT_EQ(e.code(), c.code) << c.fields;
    if (!c.param.empty()) {
      EXPECT_NE(std::string(e.what()).find(c.param), std::string::npos) << e.what();
    }
  }
}

}  // namespace k3::server::test
