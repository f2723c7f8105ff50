// `k3 inspect PATH [--json] [--tensor NAME --dequant --out FILE.npy]`: metadata and tensors of a
// safetensors file, a checkpoint directory (sharded or not) or a GGUF file (single or split). The
// .npy is written atomically and may not be one of the files read.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/gguf.h"
#include "io/npy.h"
#include "io/output_file.h"
#include "io/path_error.h"
#include "io/safetensors.h"
#include "quant/formats/dense/dense_decode.h"
#include "quant/families/family.h"
#include "quant/formats/ggml/ggml_dequant.h"
#include "quant/plan/materialize.h"
#include "tools/cli.h"

namespace k3::cli {
namespace {

namespace fs = std::filesystem;

struct InspectOptions {
  std::string path;
  bool json = false;
  std::string tensor;
  std::string param;
  bool dequant = false;
  std::string out;
};

// One row of the tensor listing, whatever the container.
struct TensorRow {
  std::string name;
  std::string type;
  std::vector<uint64_t> shape;  // slowest first
  uint64_t bytes = 0;
  std::string file;
  uint64_t offset = 0;
};

std::string shape_text(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

bool is_gguf_path(const std::string& path) {
  return fs::path(path).extension() == ".gguf";
}

// A directory without safetensors but with GGUF files opens its first (or only) GGUF file.
std::string gguf_in_directory(const std::string& dir) {
  refuse_mixed_checkpoint(dir);
  std::vector<std::string> ggufs;
  bool has_safetensors = false;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".gguf") ggufs.push_back(e.path().string());
    if (is_safetensors_checkpoint_file(e.path().filename().string())) has_safetensors = true;
  }
  if (has_safetensors || ggufs.empty()) return {};
  std::sort(ggufs.begin(), ggufs.end());
  return ggufs.front();
}

void print_rows(const std::vector<TensorRow>& rows) {
  std::printf("%zu tensors\n", rows.size());
  for (const auto& r : rows) {
    std::printf("  %-60s %-8s %-22s %12llu B  %s @%llu\n", r.name.c_str(), r.type.c_str(), shape_text(r.shape).c_str(),
                static_cast<unsigned long long>(r.bytes), fs::path(r.file).filename().c_str(),
                static_cast<unsigned long long>(r.offset));
  }
}

nlohmann::json rows_json(const std::vector<TensorRow>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : rows) {
    out.push_back({{"name", r.name}, {"type", r.type}, {"shape", r.shape}, {"bytes", r.bytes}, {"file", r.file},
                   {"offset", r.offset}});
  }
  return out;
}

std::string gguf_type_text(const GgufValue& v) {
  if (v.type() != GgufType::ARRAY) return std::string(gguf_type_name(v.type()));
  return "arr[" + std::string(gguf_type_name(v.get<GgufArray>().elem_type)) + "]";
}

int inspect_gguf(const InspectOptions& opt, const std::string& path) {
  GgufModel model = GgufModel::open(path);
  std::vector<TensorRow> rows;
  for (const auto& t : model.tensors()) {
    rows.push_back({t.name, std::string(ggml_type_name(t.type)), t.shape(), t.nbytes,
                    model.files()[t.file_index].path(), t.file_offset});
  }
  if (opt.dequant) {
    const GgufTensorInfo* t = model.find_tensor(opt.tensor);
    if (t == nullptr) throw Error(Where{path, opt.tensor, ""}, "no such tensor");
    check_output_path(opt.out, "--out");
    std::vector<float> values(t->n_elements);
    dequantize_tensor(t->type, model.tensor_data(*t), values.data(), static_cast<int64_t>(t->n_elements));
    write_npy_f32(opt.out, t->shape(), values.data());
    std::printf("wrote %s: %s %s as float32\n", opt.out.c_str(), t->name.c_str(), shape_text(t->shape()).c_str());
    return 0;
  }
  if (opt.json) {
    nlohmann::json types = nlohmann::json::object();
    for (const auto& kv : model.metadata()) types[kv.key] = gguf_type_text(kv.value);
    nlohmann::json doc = {{"format", "gguf"},
                          {"version", model.first().version()},
                          {"alignment", model.first().alignment()},
                          {"files", model.files().size()},
                          {"metadata_types", types},
                          {"tensors", rows_json(rows)}};
    // Metadata values are streamed (an array may hold millions of elements) as the last member.
    std::string head = doc.dump(1, ' ', false, nlohmann::json::error_handler_t::replace);
    head.resize(head.size() - 2);  // drops "\n}"
    std::cout << head << ",\n \"metadata\": {";
    const auto sink = [](std::string_view text) {
      std::cout.write(text.data(), static_cast<std::streamsize>(text.size()));
      return true;
    };
    bool first = true;
    for (const auto& kv : model.metadata()) {
      std::cout << (first ? "\n  " : ",\n  ") << nlohmann::json(kv.key).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                << ": ";
      write_gguf_value_json(kv.value, sink);
      first = false;
    }
    std::cout << (first ? "}\n}\n" : "\n }\n}\n");
    return 0;
  }
  std::printf("GGUF v%u, %zu file(s), alignment %llu, %zu metadata keys\n", model.first().version(), model.files().size(),
              static_cast<unsigned long long>(model.first().alignment()), model.metadata().size());
  for (const auto& kv : model.metadata()) {
    std::string value;
    write_gguf_value_json(kv.value, [&value](std::string_view text) {
      value += text.substr(0, 121 - std::min<size_t>(value.size(), 121));
      return value.size() <= 120;
    });
    if (value.size() > 120) value = value.substr(0, 117) + "...";
    std::printf("  %-50s %-10s %s\n", kv.key.c_str(), gguf_type_text(kv.value).c_str(), value.c_str());
  }
  print_rows(rows);
  return 0;
}

int inspect_safetensors(const InspectOptions& opt) {
  SafetensorsCheckpoint ckpt = SafetensorsCheckpoint::open(opt.path);
  std::vector<TensorRow> rows;
  for (const auto& e : ckpt.entries()) {
    const TensorInfo& t = ckpt.info(e);
    rows.push_back({t.name, std::string(dtype_name(t.dtype)), t.shape, t.nbytes, ckpt.shard_of(e).path(), t.offset});
  }
  if (opt.dequant) {
    const auto* e = ckpt.find(opt.tensor);
    if (e == nullptr) throw Error(Where{opt.path, opt.tensor, ""}, "no such tensor");
    check_output_path(opt.out, "--out");
    const TensorInfo& t = ckpt.info(*e);
    std::vector<float> values(t.numel());
    decode_dense(t.dtype, ckpt.data(*e), values.data(), values.size(), Where{ckpt.shard_of(*e).path(), t.name, "dtype"});
    write_npy_f32(opt.out, t.shape, values.data());
    std::printf("wrote %s: %s %s as float32\n", opt.out.c_str(), t.name.c_str(), shape_text(t.shape).c_str());
    return 0;
  }
  if (opt.json) {
    nlohmann::json meta = nlohmann::json::object();
    for (const auto& shard : ckpt.shards()) {
      for (const auto& [k, v] : shard.metadata()) meta[k] = v;
    }
    nlohmann::json doc = {{"format", "safetensors"},
                          {"files", ckpt.shards().size()},
                          {"metadata", meta},
                          {"tensors", rows_json(rows)}};
    std::cout << doc.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return 0;
  }
  uint64_t total = 0;
  for (const auto& r : rows) total += r.bytes;
  std::printf("safetensors, %zu file(s)%s, %llu payload bytes\n", ckpt.shards().size(),
              ckpt.index_path().empty() ? "" : (" via " + fs::path(ckpt.index_path()).filename().string()).c_str(),
              static_cast<unsigned long long>(total));
  for (const auto& shard : ckpt.shards()) {
    for (const auto& [k, v] : shard.metadata()) std::printf("  %s = %s\n", k.c_str(), v.c_str());
  }
  print_rows(rows);
  return 0;
}

// --param: one model parameter through the checkpoint's load plan and its scheme's exact reference.
int dequant_param(const InspectOptions& opt) {
  const LoadPlan plan = plan_checkpoint(opt.path);
  if (!plan.ok()) {
    throw Error(Where{opt.path, "", ""}, "the load plan has " + std::to_string(plan.problems.size()) +
                                             " problem(s) (see k3 check); first: " + plan.problems.front().text());
  }
  const int64_t i = plan.index_of(opt.param);
  if (i < 0) throw Error(Where{opt.path, opt.param, ""}, "no such parameter (k3 check --json lists them)");
  PlanFiles files(plan);
  const ParamSpec& spec = plan.params[static_cast<size_t>(i)];
  const std::vector<float> values = materialize(plan.bindings[static_cast<size_t>(i)], spec, files);
  check_output_path(opt.out, "--out");  // the plan's files were opened by materialize
  write_npy_f32(opt.out, spec.shape, values.data());
  std::printf("wrote %s: %s %s (%s) as float32\n", opt.out.c_str(), spec.name.c_str(), shape_text(spec.shape).c_str(),
              plan.bindings[static_cast<size_t>(i)].scheme.name().c_str());
  return 0;
}

int run_inspect(const InspectOptions& opt) {
  try {
    if (!fs::exists(opt.path)) throw Error(Where{opt.path, "", ""}, "no such file or directory");
    if (!opt.param.empty()) return dequant_param(opt);
    std::string gguf = is_gguf_path(opt.path) ? opt.path : (fs::is_directory(opt.path) ? gguf_in_directory(opt.path) : "");
    return gguf.empty() ? inspect_safetensors(opt) : inspect_gguf(opt, gguf);
  } catch (const fs::filesystem_error& e) {
    throw path_error(e, opt.path);
  }
}

}  // namespace

Registered add_inspect(CLI::App& app) {
  auto opt = std::make_shared<InspectOptions>();
  auto* cmd = app.add_subcommand("inspect", "List metadata and tensors of a checkpoint file or directory");
  cmd->add_option("path", opt->path, "safetensors file, checkpoint directory or GGUF file")->required();
  cmd->add_flag("--json", opt->json, "Print one JSON object with metadata and tensors");
  auto* tensor = cmd->add_option("--tensor", opt->tensor, "Tensor (as stored) to dump");
  auto* param = cmd->add_option("--param", opt->param, "Model parameter (logical name) to dump, via the load plan");
  auto* dequant = cmd->add_flag("--dequant", opt->dequant, "Dequantize --tensor or --param to float32");
  auto* out = cmd->add_option("--out", opt->out, "Output .npy path for --dequant");
  tensor->excludes(param);
  dequant->needs(out);
  out->needs(dequant);
  tensor->needs(dequant);
  param->needs(dequant);
  cmd->parse_complete_callback([opt] {
    if (opt->dequant && opt->tensor.empty() && opt->param.empty()) {
      throw CLI::ValidationError("--dequant", "needs --tensor or --param");
    }
  });
  return {cmd, [opt] { return run_inspect(*opt); }};
}

}  // namespace k3::cli
