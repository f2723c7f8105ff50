#include "quant/plan/plan_report.h"

#include <cstdio>
#include <map>

namespace k3 {
namespace {

std::string human_bytes(uint64_t b) {
  char buf[32];
  if (b >= (1ull << 30)) {
    std::snprintf(buf, sizeof(buf), "%.2f GiB", b / double(1ull << 30));
  } else if (b >= (1ull << 20)) {
    std::snprintf(buf, sizeof(buf), "%.2f MiB", b / double(1ull << 20));
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f KiB", b / 1024.0);
  }
  return buf;
}

}  // namespace

std::string plan_table(const LoadPlan& plan, const std::string& checkpoint) {
  struct Row {
    uint64_t params = 0, bytes = 0;
    std::map<std::string, uint64_t> schemes;
  };
  std::map<int, Row> rows;
  uint64_t total = 0, sources = 0;
  for (size_t i = 0; i < plan.bindings.size(); ++i) {
    const Binding& b = plan.bindings[i];
    Row& r = rows[static_cast<int>(plan.params[i].group)];
    r.params++;
    r.bytes += b.stored_bytes();
    r.schemes[b.scheme.name()]++;
    total += b.stored_bytes();
    for (const auto& p : b.parts) sources += p.tensors.size();
  }
  std::string out;
  char line[512];
  std::snprintf(line, sizeof(line), "checkpoint %s\nfamily     %s  (quantized latent projections: %s, split GGUF kv_b: %s, experts from pack: %s)\n",
                checkpoint.c_str(), plan.family.c_str(), plan.caps.quantized_latent_projections ? "yes" : "no",
                plan.caps.split_gguf_kv_b ? "yes" : "no", plan.caps.experts_from_pack ? "yes" : "no");
  out += line;
  std::snprintf(line, sizeof(line), "files      %zu; %zu parameters from %llu source tensors, %s; %zu tensors skipped\n\n",
                plan.files.size(), plan.bindings.size(), static_cast<unsigned long long>(sources), human_bytes(total).c_str(),
                plan.skipped.size());
  out += line;
  std::snprintf(line, sizeof(line), "  %-16s %7s %12s  %s\n", "group", "params", "bytes", "schemes");
  out += line;
  for (const auto& [group, r] : rows) {
    std::string schemes;
    for (const auto& [name, n] : r.schemes) schemes += (schemes.empty() ? "" : ", ") + name + " ×" + std::to_string(n);
    std::snprintf(line, sizeof(line), "  %-16s %7llu %12s  %s\n", param_group_name(static_cast<ParamGroup>(group)),
                  static_cast<unsigned long long>(r.params), human_bytes(r.bytes).c_str(), schemes.c_str());
    out += line;
  }
  out += "\n";
  if (plan.ok()) {
    out += "OK: every parameter is bound exactly once and every tensor is consumed\n";
  } else {
    out += std::to_string(plan.problems.size()) + " problem(s):\n";
    for (const auto& p : plan.problems) out += "  " + p.text() + "\n";
  }
  return out;
}

Json plan_json(const LoadPlan& plan, const std::string& checkpoint) {
  Json bindings = Json::array();
  for (size_t i = 0; i < plan.bindings.size(); ++i) {
    const Binding& b = plan.bindings[i];
    Json parts = Json::array();
    for (const auto& p : b.parts) {
      Json tensors = Json::array();
      for (const auto& t : p.tensors) {
        tensors.push_back({{"file", plan.files.at(t.file)}, {"name", t.name}, {"dtype", t.dtype}, {"shape", t.shape},
                           {"offset", t.offset}, {"nbytes", t.nbytes}});
      }
      parts.push_back({{"role", p.role}, {"tensors", tensors}});
    }
    Json transforms = Json::array();
    for (Transform t : b.transforms) transforms.push_back(transform_name(t));
    bindings.push_back({{"param", b.param},
                        {"shape", plan.params[i].shape},
                        {"group", param_group_name(plan.params[i].group)},
                        {"scheme", b.scheme.name()},
                        {"bytes", b.stored_bytes()},
                        {"sources", parts},
                        {"transforms", transforms}});
  }
  Json problems = Json::array();
  for (const auto& p : plan.problems) problems.push_back(p.text());
  return {{"checkpoint", checkpoint},
          {"family", plan.family},
          {"caps",
           {{"quantized_latent_projections", plan.caps.quantized_latent_projections},
            {"split_gguf_kv_b", plan.caps.split_gguf_kv_b},
            {"experts_from_pack", plan.caps.experts_from_pack}}},
          {"files", plan.files},
          {"bindings", bindings},
          {"skipped", plan.skipped},
          {"problems", problems},
          {"ok", plan.ok()}};
}

}  // namespace k3
