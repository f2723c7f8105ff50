// libFuzzer target for the GGUF parser (from memory) and the dequantizers behind it. Any
// k3::Error is an accepted rejection; every other exception, crash or sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf.h"
#include "quant/ggml/ggml_dequant.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const k3::GgufFile f = k3::GgufFile::parse({data, size}, "fuzz.gguf");
    for (const k3::GgufKeyValue& kv : f.metadata()) {
      // metadata strings are arbitrary bytes: JSON output must replace invalid UTF-8
      (void)k3::gguf_value_to_json(kv.value).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
    std::vector<float> out;
    for (const k3::GgufTensorInfo& t : f.tensors()) {
      if (!k3::ggml_has_dequant(t.type) || t.n_elements > (1u << 16)) continue;
      out.resize(t.n_elements);
      k3::dequantize_row(t.type, f.tensor_data(t).data(), out.data(), static_cast<int64_t>(t.n_elements));
    }
  } catch (const k3::Error&) {
  }
  return 0;
}
