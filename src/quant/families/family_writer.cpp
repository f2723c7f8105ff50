#include "quant/families/family_writer.h"

#include <omp.h>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>

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

namespace {

// Produces units `order` of `units` on `workers` threads, at most 2·workers of them produced and
// not yet handed on, and hands each one's pieces to `take` in `order` on the calling thread. The
// first unit that throws (in `order`) stops the rest and its exception is rethrown here.
void produce_side_by_side(const std::vector<WriteUnit>& units, const std::vector<size_t>& order, int workers,
                          const std::function<void(size_t, std::vector<OutPiece>)>& take) {
  if (workers <= 1 || order.size() <= 1) {
    for (size_t i : order) take(i, units[i].produce());
    return;
  }
  const size_t ahead = 2 * static_cast<size_t>(workers);
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::optional<std::vector<OutPiece>>> produced(order.size());
  std::vector<std::exception_ptr> failed(order.size());
  std::vector<bool> ready(order.size(), false);
  size_t next = 0, taken = 0;
  bool stop = false;
  const auto work = [&] {
    omp_set_num_threads(1);  // this thread's parallel loops: the units are the parallelism
    for (;;) {
      size_t j = 0;
      {
        std::unique_lock lock(mutex);
        changed.wait(lock, [&] { return stop || next >= order.size() || next < taken + ahead; });
        if (stop || next >= order.size()) return;
        j = next++;
      }
      std::optional<std::vector<OutPiece>> pieces;
      std::exception_ptr error;
      try {
        pieces = units[order[j]].produce();
      } catch (...) {
        error = std::current_exception();
      }
      {
        std::lock_guard lock(mutex);
        produced[j] = std::move(pieces);
        failed[j] = error;
        ready[j] = true;
      }
      changed.notify_all();
    }
  };
  std::vector<std::jthread> threads;  // joined before the state above goes
  const auto halt = [&] {
    {
      std::lock_guard lock(mutex);
      stop = true;
    }
    changed.notify_all();
    threads.clear();
  };
  for (int w = 0; w < workers; ++w) threads.emplace_back(work);
  try {
    for (size_t j = 0; j < order.size(); ++j) {
      std::vector<OutPiece> pieces;
      {
        std::unique_lock lock(mutex);
        changed.wait(lock, [&] { return ready[j]; });
        if (failed[j]) std::rethrow_exception(failed[j]);
        pieces = std::move(*produced[j]);
        produced[j].reset();
      }
      take(order[j], std::move(pieces));
      {
        std::lock_guard lock(mutex);
        taken = j + 1;
      }
      changed.notify_all();
    }
  } catch (...) {
    halt();
    throw;
  }
  halt();
}

// Runs the units `run` accepts (all: every payload must be written), then the files.
WriteSummary run_units(WritePlan plan, const std::string& dir, const QuantizeOptions& options,
                       const std::function<bool(const WriteUnit&)>& run) {
  fs::create_directories(dir);
  plan.sink->open(dir);
  WriteSummary summary;
  summary.units = plan.units.size();
  summary.tensors = plan.sink->size();
  std::vector<size_t> order;
  for (size_t i = 0; i < plan.units.size(); ++i) {
    if (!run || run(plan.units[i])) order.push_back(i);
  }
  // With several units at once, the large ones go first, alone (each unit's pieces land at their
  // own offsets, so the order of writing does not change the files).
  std::vector<size_t> alone, rest;
  for (size_t i : order) {
    (options.concurrent_units > 1 && plan.units[i].bytes >= options.alone_unit_bytes ? alone : rest).push_back(i);
  }
  const auto take = [&](size_t i, std::vector<OutPiece> pieces) {
    const WriteUnit& unit = plan.units[i];
    uint64_t bytes = 0;
    for (const OutPiece& piece : pieces) {
      plan.sink->write(piece.tensor, piece.offset, piece.bytes);
      bytes += piece.bytes.size();
    }
    if (bytes != unit.bytes) {
      throw Error(Where{dir, unit.label, ""}, "internal: the unit wrote " + std::to_string(bytes) + " bytes, its layout says " +
                                                  std::to_string(unit.bytes));
    }
    summary.bytes += bytes;
    if (options.progress) options.progress(UnitDone{i + 1, plan.units.size(), unit.label, unit.format, bytes});
  };
  for (size_t i : alone) take(i, plan.units[i].produce());
  produce_side_by_side(plan.units, rest, options.concurrent_units, take);
  plan.sink->close(run ? PayloadPolicy::kHeadersOnly : PayloadPolicy::kWhole);
  write_config_files(dir, plan.config_doc);
  for (const auto& [name, text] : plan.files) write_text_file((fs::path(dir) / name).string(), text);
  if (plan.finish) plan.finish(dir);
  return summary;
}

}  // namespace

WriteSummary run_write_plan(WritePlan plan, const std::string& dir, const QuantizeOptions& options) {
  return run_units(std::move(plan), dir, options, nullptr);
}

WriteSummary write_family_sample(FamilyId family, const FloatSource& source, const Json& config_doc,
                                 const std::string& dir, int64_t template_experts, const QuantizeOptions& options) {
  if (template_experts < 1) throw Error(Where{dir, "", "template experts"}, "must be at least 1");
  WritePlan plan = write_plan(family, source, config_doc, options);
  if (plan.finish) {
    throw Error(Where{dir, "", "--family"}, std::string("a sample ") + family_name(family) +
                                                " checkpoint cannot be written: its files are cut from written payloads");
  }
  std::unordered_set<std::string> skipped;  // the units of experts past the templates
  for (const ParamSpec& spec : source.params()) {
    if (spec.kind != ParamKind::ExpertBank) continue;
    for (int64_t e = template_experts; e < static_cast<int64_t>(spec.shape[0]); ++e) skipped.insert(unit_label(spec, e));
  }
  return run_units(std::move(plan), dir, options, [&](const WriteUnit& u) { return !skipped.contains(u.label); });
}

void alias_template_experts(LoadPlan& plan, int64_t template_experts) {
  for (Binding& b : plan.bindings) {
    const int64_t i = plan.index_of(b.param);
    if (i < 0 || plan.params[static_cast<size_t>(i)].kind != ParamKind::ExpertBank) continue;
    const size_t experts = plan.params[static_cast<size_t>(i)].shape[0];
    for (SourcePart& part : b.parts) {
      if (part.tensors.size() != experts) continue;  // one tensor for the whole bank
      for (size_t e = static_cast<size_t>(template_experts); e < experts; ++e) {
        part.tensors[e] = part.tensors[e % static_cast<size_t>(template_experts)];
      }
    }
  }
}

WriteSummary write_family_headers(FamilyId family, const FloatSource& source, const Json& config_doc, const std::string& dir,
                                  TensorFiles tensors) {
  WritePlan plan = write_plan(family, source, config_doc, QuantizeOptions{});
  if (plan.finish) {
    throw Error(Where{dir, "", "--family"}, std::string("a header-only ") + family_name(family) +
                                                " checkpoint cannot be written: its files are cut from written payloads");
  }
  fs::create_directories(dir);
  if (tensors == TensorFiles::kHeadersOnly) {
    plan.sink->open(dir);
    plan.sink->close(PayloadPolicy::kHeadersOnly);
  }
  write_config_files(dir, plan.config_doc);
  for (const auto& [name, text] : plan.files) write_text_file((fs::path(dir) / name).string(), text);
  return {plan.units.size(), plan.sink->size(), plan.sink->total_bytes()};
}

Json without_quantization_config(Json doc) {
  doc.erase("quantization_config");
  if (doc.contains("text_config") && doc["text_config"].is_object()) doc["text_config"].erase("quantization_config");
  return doc;
}

Footprint layout_footprint(FamilyId family, const FloatSource& source, const Json& config_doc) {
  const WritePlan plan = write_plan(family, source, config_doc, QuantizeOptions{});
  Footprint out;
  out.family = family_name(family);
  out.from_layout = true;
  std::unordered_map<std::string, size_t> param_of;  // unit label → parameter index
  for (size_t i = 0; i < source.params().size(); ++i) {
    const ParamSpec& spec = source.params()[i];
    out.params.push_back({spec, 0, ""});
    if (spec.kind != ParamKind::ExpertBank) {
      param_of.emplace(unit_label(spec), i);
      continue;
    }
    for (uint64_t e = 0; e < spec.shape[0]; ++e) param_of.emplace(unit_label(spec, static_cast<int64_t>(e)), i);
  }
  for (const WriteUnit& unit : plan.units) {
    const auto it = param_of.find(unit.label);
    if (it == param_of.end()) throw Error(Where{"", unit.label, ""}, "internal: a write unit of no parameter");
    ParamFootprint& p = out.params[it->second];
    p.bytes += unit.bytes;
    if (p.format.empty()) p.format = unit.format;
  }
  return out;
}

WriteSummary write_family(FamilyId family, const FloatSource& source, const Json& config_doc, const std::string& dir,
                          const QuantizeOptions& options) {
  return run_write_plan(write_plan(family, source, config_doc, options), dir, options);
}

void write_family_checkpoint(FamilyId family, const MasterWeights& master, const Json& config_doc, const std::string& out_dir) {
  write_family(family, MasterSource(master), config_doc, out_dir);
}

}  // namespace k3
