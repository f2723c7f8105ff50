// `k3 make-tiny --arch A --family F --out DIR [--seed N] [--size tiny|small]`: a checkpoint of the
// real architecture in one family, quantized from a seeded float master (saved beside it as
// master.safetensors), and a tiny tiktoken-format tokenizer (tiktoken.model + tokenizer_config.json)
// whose 256 special ids are the last of the model's vocabulary. DIR must be new, empty, or an earlier
// make-tiny output.
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "io/path_error.h"
#include "model/tiny_config.h"
#include "quant/families/family.h"
#include "tokenizer/tiny_vocab.h"
#include "tokenizer/tokenizer.h"
#include "tools/cli.h"
#include "tools/flag_checks.h"

namespace k3::cli {
namespace {

// --out is a directory that does not exist yet, is empty, or holds an earlier make-tiny output
// (master.safetensors): anything else could be a real checkpoint or unrelated files.
void check_output_dir(const std::string& out) {
  namespace fs = std::filesystem;
  const fs::file_status st = fs::status(out);
  if (!fs::exists(st)) return;
  if (!fs::is_directory(st)) throw Error(Where{out, "", "--out"}, "exists and is not a directory");
  if (fs::is_empty(out) || fs::exists(fs::path(out) / "master.safetensors")) return;
  throw Error(Where{out, "", "--out"}, "is a directory that is neither empty nor an earlier make-tiny output; refusing to write into it");
}

}  // namespace

Registered add_make_tiny(CLI::App& app) {
  struct Options {
    std::string arch = "kimi-k3", family = "bf16", out, size = "tiny";
    uint64_t seed = 1;
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("make-tiny", "Write a small checkpoint of the real architecture in one family");
  cmd->add_option("--arch", opt->arch, "kimi-k3 | kimi-linear")
      ->check(parsed_by([](const std::string& t) { parse_tiny_arch(t); }))
      ->capture_default_str();
  cmd->add_option("--family", opt->family, "bf16 | modelopt-mixed | modelopt-nvfp4 | modelopt-fp8 | compressed-tensors-mxfp4 | fp8-block | modelslim-w4a8 | gguf | gguf-expert-pack")
      ->check(parsed_by([](const std::string& t) { parse_family(t); }))
      ->capture_default_str();
  cmd->add_option("--out", opt->out, "output directory: new, empty, or an earlier make-tiny output")->required();
  cmd->add_option("--seed", opt->seed, "seed of the float master")->check(unsigned_integer())->capture_default_str();
  cmd->add_option("--size", opt->size, "tiny | small")
      ->check(parsed_by([](const std::string& t) { parse_tiny_size(t); }))
      ->capture_default_str();
  return {cmd, [opt] {
            try {
              check_output_dir(opt->out);
            } catch (const std::filesystem::filesystem_error& e) {
              throw path_error(e, opt->out);
            }
            const FamilyId family = parse_family(opt->family);
            const Json config_doc = tiny_config_json(parse_tiny_arch(opt->arch), parse_tiny_size(opt->size));
            const K3Config config = parse_k3_config(parse_json(config_doc.dump(), opt->out + "/config.json"));
            const MasterWeights master = make_master(config, opt->seed);
            write_family_checkpoint(family, master, config_doc, opt->out);
            write_master(master, (std::filesystem::path(opt->out) / "master.safetensors").string());
            write_tiny_tokenizer(opt->out, static_cast<uint32_t>(config.vocab_size) - Tokenizer::kNumSpecials);
            uint64_t params = 0;
            for (const auto& p : master.params) params += p.numel();
            std::printf("wrote %s: %s %s, %s, %.1f M parameters, seed %llu\n", opt->out.c_str(), opt->arch.c_str(),
                        opt->size.c_str(), opt->family.c_str(), params / 1e6, static_cast<unsigned long long>(opt->seed));
            return 0;
          }};
}

}  // namespace k3::cli
