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
#include "io/positional_file.h"
#include "io/safetensors.h"
#include "quant/families/family.h"
#include "quant/families/float_source.h"
#include "quant/families/quantize_options.h"
#include "quant/plan/footprint.h"

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
  // Every payload written whole, else throws (kWhole); kHeadersOnly leaves unwritten payloads as holes.
  virtual void close(PayloadPolicy policy) = 0;
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
  uint64_t bytes = 0;  // the payload bytes produce() returns (run_write_plan checks it)
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

// The config document without its quantization_config (top level, or under text_config as in the
// K3 release): what a family's writer is given, since each writes its own.
Json without_quantization_config(Json config_doc);

// Lays out the checkpoint write_family would write — config files, every tensor file with its full
// header, at its full size — without computing or writing any payload: payload bytes stay holes
// that read as zero (sparse files take no disk space for them). For planning at real sizes
// (`k3 check`, placement) from a config alone. Refuses families whose files are derived from
// written payloads (the ExpertPack). Returns the tensors declared and their payload bytes.
// Policy kHeadersOnly; kNone writes the config files alone (what `k3 check --devices` lays a
// config-only directory out from).
enum class TensorFiles { kHeadersOnly, kNone };
WriteSummary write_family_headers(FamilyId family, const FloatSource& source, const Json& config_doc, const std::string& dir,
                                  TensorFiles tensors = TensorFiles::kHeadersOnly);

// What each parameter of `source` weighs in the checkpoint write_family would write (the units'
// bytes, summed per parameter; a parameter the family folds into another weighs nothing), without
// computing a payload: the footprint of a config alone.
Footprint layout_footprint(FamilyId family, const FloatSource& source, const Json& config_doc);

// Runs a plan a family's writer laid out (write_family does both).
WriteSummary run_write_plan(WritePlan plan, const std::string& dir, const QuantizeOptions& options = {});

// A benchmark's checkpoint at real shapes: what write_family writes, except that only the first
// `template_experts` routed experts of each bank are computed and written; the others stay holes
// (sparse, reading as zero) that no plan should read: alias_template_experts points expert e of the
// plan at expert e % template_experts. Refuses families whose files are cut from written payloads.
WriteSummary write_family_sample(FamilyId family, const FloatSource& source, const Json& config_doc,
                                 const std::string& dir, int64_t template_experts, const QuantizeOptions& options = {});
// Binds expert e of every routed-expert bank of `plan` to the source tensors of expert
// e % template_experts (the ones write_family_sample wrote).
void alias_template_experts(LoadPlan& plan, int64_t template_experts);

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
