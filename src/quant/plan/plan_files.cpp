#include "quant/plan/plan_files.h"

#include "core/numeric.h"
#include "io/file_digest.h"
#include "io/safetensors.h"
#include "quant/formats/dense/dense_decode.h"

namespace k3 {

uint64_t numel(const std::vector<uint64_t>& shape) {
  uint64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

PlanFiles::PlanFiles(const LoadPlan& plan) : plan_(plan), files_(plan.files.size()) {
  for (const FileDigest& d : plan.digests) verify_file_digest(d);
}

std::shared_ptr<File> PlanFiles::file(const SourceTensor& t) {
  auto& f = files_.at(t.file);
  if (!f) f = File::open(plan_.files.at(t.file));
  return f;
}

std::span<const uint8_t> PlanFiles::bytes(const SourceTensor& t) { return file(t)->view(t.offset, t.nbytes); }

void PlanFiles::release(const SourceTensor& t) {
  if (const auto& f = files_.at(t.file)) f->release_view(t.offset, t.nbytes);
}

std::vector<float> decode_source(const SourceTensor& t, PlanFiles& files) {
  const Where where{files.path(t), t.name, "dtype"};
  std::vector<float> out(numel(t.shape));
  decode_dense(dtype_from_string(t.dtype, where), files.bytes(t), out.data(), out.size(), where);
  return out;
}

}  // namespace k3
