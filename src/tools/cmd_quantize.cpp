// `k3 quantize --from DIR --family F --out DIR [--recipe NAME] [--calib FILE] [--threads N]`: a
// checkpoint of family F from a dense float one (BF16/F16/F32 safetensors with config.json), read
// and written one tensor at a time by the family's writer (quant/families/family_writer.h, the same
// one make-tiny uses). The output is built in a temporary folder beside --out and renamed into place
// at the end; --out must not exist or be an empty folder. Tokenizer files and generation_config.json
// are copied. --calib runs the float model over calibration sequences first and sets the ModelOpt
// families' static input_scale from the measured activation ranges.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "io/path_error.h"
#include "quant/families/family_writer.h"
#include "runtime/calibration.h"
#include "runtime/engine.h"
#include "tools/cli.h"
#include "tools/flag_checks.h"
#include "tools/output_dir.h"

namespace k3::cli {
namespace {
namespace fs = std::filesystem;

// Files of a checkpoint folder that are not weights and travel with them (those present are copied).
constexpr const char* kCopiedFiles[] = {"tiktoken.model", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                                        "generation_config.json"};

bool has_static_input_scales(FamilyId f) {
  return f == FamilyId::ModelOptMixed || f == FamilyId::ModelOptNvfp4 || f == FamilyId::ModelOptFp8;
}

// The temporary folder the output is built in; removed unless committed.
class StagingDir {
 public:
  explicit StagingDir(const std::string& out) {
    fs::path target = fs::absolute(out).lexically_normal();
    if (target.filename().empty()) target = target.parent_path();  // "DIR/"
    target_ = target.string();
    path_ = (target.parent_path() / ("." + target.filename().string() + ".k3tmp-" + std::to_string(::getpid()))).string();
    fs::remove_all(path_);
    std::error_code ec;
    fs::create_directory(path_, ec);
    if (ec) throw Error(Where{out, "", "--out"}, "cannot create a folder beside it: " + ec.message());
  }
  ~StagingDir() {
    std::error_code ec;
    if (!committed_) fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  // Renames the folder to `out` (an empty folder there is replaced).
  void commit(const std::string& out) {
    std::error_code ec;
    fs::rename(path_, target_, ec);
    if (ec) throw Error(Where{out, "", "--out"}, "cannot move the finished output into place: " + ec.message());
    committed_ = true;
  }

 private:
  std::string target_, path_;
  bool committed_ = false;
};

struct Options {
  std::string from, family, out, calib, recipe;
  int threads = 0;
};

int run(const Options& opt) {
  const auto start = std::chrono::steady_clock::now();
  const FamilyId family = parse_family(opt.family);
  const bool gguf = family == FamilyId::Gguf || family == FamilyId::GgufExpertPack;
  if (!opt.recipe.empty() && !gguf) {
    throw Error(Where{"", "", "--recipe"}, std::string("applies to the gguf and gguf-expert-pack families only, not ") + opt.family);
  }
  if (!opt.calib.empty() && !has_static_input_scales(family)) {
    throw Error(Where{opt.calib, "", "--calib"}, std::string("calibrates static activation scales, which only modelopt-mixed, "
                                                             "modelopt-nvfp4 and modelopt-fp8 have, not ") +
                                                     opt.family);
  }
  try {
    check_new_output_dir(opt.out);  // an empty folder is replaced by the finished output
  } catch (const fs::filesystem_error& e) {
    throw path_error(e, opt.out);
  }
  const CheckpointSource source(opt.from);
  const std::optional<JsonNode>& config_json = source.checkpoint().config_json;

  StagingDir staging(opt.out);
  QuantizeOptions options;
  options.producer = "k3 quantize";
  if (!opt.recipe.empty()) options.gguf_recipe = parse_gguf_recipe(opt.recipe);
  InputAmax amax;
  size_t calib_sequences = 0;
  if (!opt.calib.empty()) {
    const auto sequences = load_calibration_ids(opt.calib, source.config().vocab_size);
    calib_sequences = sequences.size();
    amax = calibrate_input_amax(opt.from, sequences, opt.threads, [](size_t done, size_t total) {
      std::fprintf(stderr, "calibrating: sequence %zu/%zu\n", done, total);
    });
    options.input_amax = &amax;
  }
  options.progress = [](const UnitDone& u) {
    std::fprintf(stderr, "[%zu/%zu] %s  %s  %s\n", u.index, u.count, u.label.c_str(), u.format.c_str(), size_text(u.bytes).c_str());
  };

  const WriteSummary summary = write_family(family, source, config_json->value(), staging.path(), options);
  for (const char* name : kCopiedFiles) {
    if (source.checkpoint().has_file(name)) {
      fs::copy_file(source.checkpoint().path(name), fs::path(staging.path()) / name, fs::copy_options::overwrite_existing);
    }
  }
  staging.commit(opt.out);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::string what = opt.family;
  if (gguf) what += ", recipe " + std::string(gguf_recipe_name(options.gguf_recipe));
  if (calib_sequences) what += ", calibrated on " + std::to_string(calib_sequences) + " sequences";
  std::printf("wrote %s: %s from %s: %zu tensors, %s (from %s) in %.1f s\n", opt.out.c_str(), what.c_str(), opt.from.c_str(),
              summary.tensors, size_text(summary.bytes).c_str(), size_text(source.stored_bytes()).c_str(), seconds);
  return 0;
}

}  // namespace

Registered add_quantize(CLI::App& app) {
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("quantize", "Write a checkpoint of one family from a dense float (bf16) checkpoint");
  cmd->add_option("--from", opt->from, "dense float checkpoint folder (BF16/F16/F32 safetensors + config.json)")->required();
  cmd->add_option("--family", opt->family,
                  "bf16 | modelopt-mixed | modelopt-nvfp4 | modelopt-fp8 | compressed-tensors-mxfp4 | fp8-block | modelslim-w4a8 | gguf | "
                  "gguf-expert-pack")
      ->required()
      ->check(parsed_by([](const std::string& t) { parse_family(t); }));
  cmd->add_option("--out", opt->out, "output folder: new or empty")->required();
  cmd->add_option("--recipe", opt->recipe, "GGUF type recipe: default | q4_k_m | q2_k_experts (gguf families only)")
      ->check(parsed_by([](const std::string& t) { parse_gguf_recipe(t); }));
  cmd->add_option("--calib", opt->calib, "calibration token ids: a JSON array of id arrays (ModelOpt families)");
  cmd->add_option("--threads", opt->threads, "CPU threads of the calibration run (default: all cores)")
      ->check(integer_in(0, max_engine_threads(), "at most " + std::to_string(kMaxThreadsPerHardwareThread) + " × the hardware threads"));
  return {cmd, [opt] {
            try {
              return run(*opt);
            } catch (const fs::filesystem_error& e) {
              throw path_error(e, opt->out);
            }
          }};
}

}  // namespace k3::cli
