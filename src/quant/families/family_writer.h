// Writing a checkpoint of any family from a float model, streamed: one writer per family, used by
// `k3 make-tiny` (its seeded master) and `k3 quantize` (a dense float checkpoint). A family's writer
// first lays the checkpoint out — every output tensor declared with its name, type and shape, the
// config files computed — then the driver opens the files (headers written from the declarations),
// runs the write units one by one (each reads the parameter or expert it needs from the source,
// quantizes it and hands back its bytes, which are written in place) and closes them. At most one
// unit's source values and output bytes are held at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "io/json.h"
#include "io/safetensors.h"
#include "quant/families/family.h"
#include "quant/families/float_source.h"
#include "quant/families/quantize_options.h"

namespace k3 {

// Where a family's tensors go: declared first (by the family's writer, through its concrete type),
// then opened in a directory, written in pieces, closed.
class TensorSink {
 public:
  virtual ~TensorSink() = default;
  virtual size_t size() const = 0;                      // declared tensors
  virtual uint64_t nbytes(size_t tensor) const = 0;     // payload bytes of a declared tensor
  virtual uint64_t total_bytes() const = 0;             // of all declared payloads
  virtual void open(const std::string& dir) = 0;        // creates the files, writes their headers
  virtual void write(size_t tensor, uint64_t offset, std::span<const uint8_t> bytes) = 0;
  virtual void close() = 0;                             // every payload written whole, else throws
};

// Output bytes for declared tensor `tensor`, at `offset` inside its payload.
struct OutPiece {
  size_t tensor = 0;
  uint64_t offset = 0;
  std::vector<uint8_t> bytes;
};

// One parameter, or one expert of a bank: what is read, quantized and reported together.
struct WriteUnit {
  std::string label;   // the module: "model.layers.3.self_attn.q_proj", "…experts.5.w1"
  std::string format;  // what it is stored as: "BF16", "NVFP4", "FP8_PB_WO", "q4_K", …
  std::function<std::vector<OutPiece>()> produce;
};

// A family's checkpoint, laid out and ready to stream.
struct WritePlan {
  std::unique_ptr<TensorSink> sink;
  std::vector<WriteUnit> units;
  Json config_doc;                                        // config.json, with the family's quantization config
  std::vector<std::pair<std::string, std::string>> files;  // other files the family writes: name, text
  // After the tensors and every file above are written (the ExpertPack is cut from the GGUF).
  std::function<void(const std::string& dir)> finish;
};

struct WriteSummary {
  size_t units = 0;
  size_t tensors = 0;
  uint64_t bytes = 0;  // tensor payload bytes written
};

// Writes a checkpoint of `family` from `source` into `dir` (created when missing): config.json
// (`config_doc` plus the family's quantization config), generation_config.json, the family's files.
WriteSummary write_family(FamilyId family, const FloatSource& source, const Json& config_doc, const std::string& dir,
                          const QuantizeOptions& options = {});

// Runs a plan a family's writer laid out (write_family does both).
WriteSummary run_write_plan(WritePlan plan, const std::string& dir, const QuantizeOptions& options = {});

// The label of a parameter's unit: its name without ".weight"; of expert e of a bank, that expert's
// module ("…experts.5.w1").
std::string unit_label(const ParamSpec& spec, int64_t expert = -1);

// One writer per family (quant/families/*.cpp): the checkpoint laid out, units not run yet.
namespace family {
// dtype: BF16 (the family), or F32 (an exact float checkpoint of a master, for tests).
WritePlan write_plan_dense(const FloatSource& source, Json config_doc, Dtype dtype = Dtype::BF16);
WritePlan write_plan_modelopt(FamilyId variant, const FloatSource& source, Json config_doc, const QuantizeOptions& options);
WritePlan write_plan_compressed_tensors_mxfp4(const FloatSource& source, Json config_doc);
WritePlan write_plan_fp8_block(const FloatSource& source, Json config_doc);
WritePlan write_plan_modelslim_w4a8(const FloatSource& source, Json config_doc);
WritePlan write_plan_gguf(bool expert_pack, const FloatSource& source, Json config_doc, const QuantizeOptions& options);
}  // namespace family

}  // namespace k3
