#include "quant/families/family_writer.h"

#include <algorithm>
#include <filesystem>

#include "quant/families/checkpoint_writer.h"
#include "quant/families/tensor_binder.h"

namespace k3 {
namespace fs = std::filesystem;

namespace {

WritePlan write_plan(FamilyId id, const FloatSource& source, const Json& config_doc, const QuantizeOptions& options) {
  switch (id) {
    case FamilyId::Bf16: return family::write_plan_dense(source, config_doc);
    case FamilyId::ModelOptMixed:
    case FamilyId::ModelOptNvfp4:
    case FamilyId::ModelOptFp8: return family::write_plan_modelopt(id, source, config_doc, options);
    case FamilyId::CompressedTensorsMxfp4: return family::write_plan_compressed_tensors_mxfp4(source, config_doc);
    case FamilyId::Fp8Block: return family::write_plan_fp8_block(source, config_doc);
    case FamilyId::ModelSlimW4A8: return family::write_plan_modelslim_w4a8(source, config_doc);
    case FamilyId::Gguf: return family::write_plan_gguf(false, source, config_doc, options);
    case FamilyId::GgufExpertPack: return family::write_plan_gguf(true, source, config_doc, options);
  }
  throw Error(Where{"", "", "family"}, "unhandled family");
}

}  // namespace

std::string unit_label(const ParamSpec& spec, int64_t expert) {
  const std::string name = expert >= 0 ? expert_tensor_name(spec.name, expert, "weight") : spec.name;
  constexpr size_t kSuffix = 7;  // ".weight"
  const bool weight = name.size() > kSuffix && name.compare(name.size() - kSuffix, kSuffix, ".weight") == 0;
  return weight ? name.substr(0, name.size() - kSuffix) : name;
}

std::optional<float> InputAmax::of(const ParamSpec& spec, int64_t expert) const {
  const auto it = by_param.find(spec.name);
  if (it == by_param.end()) return std::nullopt;
  const std::vector<float>& v = it->second;
  const size_t i = expert < 0 ? 0 : static_cast<size_t>(expert);
  if (i < v.size() && v[i] > 0.0f) return v[i];
  if (expert < 0) return std::nullopt;
  const float best = v.empty() ? 0.0f : *std::max_element(v.begin(), v.end());
  return best > 0.0f ? std::optional<float>(best) : std::nullopt;
}

WriteSummary run_write_plan(WritePlan plan, const std::string& dir, const QuantizeOptions& options) {
  fs::create_directories(dir);
  plan.sink->open(dir);
  WriteSummary summary;
  summary.units = plan.units.size();
  summary.tensors = plan.sink->size();
  for (size_t i = 0; i < plan.units.size(); ++i) {
    const WriteUnit& unit = plan.units[i];
    uint64_t bytes = 0;
    for (const OutPiece& piece : unit.produce()) {
      plan.sink->write(piece.tensor, piece.offset, piece.bytes);
      bytes += piece.bytes.size();
    }
    summary.bytes += bytes;
    if (options.progress) options.progress(UnitDone{i + 1, plan.units.size(), unit.label, unit.format, bytes});
  }
  plan.sink->close();
  write_config_files(dir, plan.config_doc);
  for (const auto& [name, text] : plan.files) write_text_file((fs::path(dir) / name).string(), text);
  if (plan.finish) plan.finish(dir);
  return summary;
}

WriteSummary write_family(FamilyId family, const FloatSource& source, const Json& config_doc, const std::string& dir,
                          const QuantizeOptions& options) {
  return run_write_plan(write_plan(family, source, config_doc, options), dir, options);
}

void write_family_checkpoint(FamilyId family, const MasterWeights& master, const Json& config_doc, const std::string& out_dir) {
  write_family(family, MasterSource(master), config_doc, out_dir);
}

}  // namespace k3
