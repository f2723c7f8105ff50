// Exact dequantization of a bound parameter to float32 through each scheme's reference: what
// `k3 inspect --param` writes and what fast kernels are tested against. Reads only the bytes the
// binding names (mapped lazily, file by file).
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "io/file.h"
#include "model/parameters.h"
#include "quant/plan/load_plan.h"

namespace k3 {

// Opens the plan's files on first use and hands out zero-copy views of source tensors.
class PlanFiles {
 public:
  // Checks the plan's whole-file digests first (verify_file_digest): payload is only read from
  // files that match their manifest.
  explicit PlanFiles(const LoadPlan& plan);
  std::span<const uint8_t> bytes(const SourceTensor& t);
  // The open file holding t: kernels that read weights zero-copy keep it (and its mapping) alive.
  std::shared_ptr<File> file(const SourceTensor& t);
  const std::string& path(const SourceTensor& t) const { return plan_.files.at(t.file); }

 private:
  const LoadPlan& plan_;
  std::vector<std::shared_ptr<File>> files_;
};

// The parameter as float32, row-major in spec.shape, after the binding's transforms.
std::vector<float> materialize(const Binding& binding, const ParamSpec& spec, PlanFiles& files);

// Expert `expert` of an ExpertBank parameter [E, N, K] as float32 [N, K]: only that expert's source
// bytes are read and dequantised.
std::vector<float> materialize_expert(const Binding& binding, const ParamSpec& spec, PlanFiles& files, int64_t expert);

// A scalar source (input_scale, weight_scale_2, …) of `role` for `expert` (−1: not a bank) as float.
float scalar_source(const Binding& binding, const char* role, int64_t expert, PlanFiles& files);

// One source tensor of a dense float dtype (BF16/F16/F32/F8…) decoded to float32.
std::vector<float> decode_source(const SourceTensor& t, PlanFiles& files);

}  // namespace k3
