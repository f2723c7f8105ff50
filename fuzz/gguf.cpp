// libFuzzer target for the GGUF parser (from memory) and the dequantizers behind it. Any
// k3::Error is an accepted rejection; every other exception, crash or sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "io/gguf.h"
#include "quant/formats/ggml/ggml_dequant.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const k3::GgufFile f = k3::GgufFile::parse({data, size}, "fuzz.gguf");
    for (const k3::GgufKeyValue& kv : f.metadata()) {
      // metadata strings are arbitrary bytes: JSON output must replace invalid UTF-8; the text is
      // streamed (scripts/fuzz.sh runs this target with a small -malloc_limit_mb)
      size_t chars = 0;
      k3::write_gguf_value_json(kv.value, [&chars](std::string_view text) {
        chars += text.size();
        return true;
      });
      (void)kv.value.bytes();
    }
    std::vector<float> out;
    for (const k3::GgufTensorInfo& t : f.tensors()) {
      if (!k3::ggml_has_dequant(t.type) || t.n_elements > (1u << 16)) continue;
      out.resize(t.n_elements);
      k3::dequantize_row(t.type, f.tensor_data(t).data(), out.data(), static_cast<int64_t>(t.n_elements));
    }
    (void)f.find_integer("split.count");
    (void)f.find_string("general.architecture");
  } catch (const k3::Error&) {
  }
  return 0;
}
