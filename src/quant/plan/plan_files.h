// The files of a LoadPlan, opened on first use: zero-copy views of the source tensors every format's
// reference and kernels read.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "io/file.h"
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
  // Gives t's mapped pages back once a one-pass reader is done with them (File::release_view).
  void release(const SourceTensor& t);

 private:
  const LoadPlan& plan_;
  std::vector<std::shared_ptr<File>> files_;
};

// Elements of a stored shape.
uint64_t numel(const std::vector<uint64_t>& shape);

// One source tensor of a dense float dtype (BF16/F16/F32/F8…) decoded to float32.
std::vector<float> decode_source(const SourceTensor& t, PlanFiles& files);

}  // namespace k3
