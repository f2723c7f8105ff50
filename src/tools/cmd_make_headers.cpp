// `k3 make-headers --config FILE --family F --out DIR`: the checkpoint of family F that a model of
// this config.json would have — config files and every tensor file with its full header, at its full
// size — with no payload written (holes that read as zero; sparse files take no disk space for
// them). What `k3 check` (and `k3 check --devices`) plans from, for a model whose weights are not at
// hand: the real Kimi-K3 config gives its ~1.5 TB release in seconds. The config's own
// quantization_config (top level or under text_config) is dropped: the family writes its own.
// --no-tensors writes the config files alone, which `k3 check --devices` lays out without headers.
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "io/path_error.h"
#include "quant/families/family_writer.h"
#include "tools/cli.h"
#include "tools/flag_checks.h"
#include "tools/output_dir.h"

namespace k3::cli {

Registered add_make_headers(CLI::App& app) {
  struct Options {
    std::string config, family, out;
    bool no_tensors = false;
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("make-headers", "Write a header-only checkpoint (no weights) of a config.json in one family, for k3 check");
  cmd->add_option("--config", opt->config, "a model's config.json")->required();
  cmd->add_option("--family", opt->family, "bf16 | modelopt-mixed | modelopt-nvfp4 | modelopt-fp8 | compressed-tensors-mxfp4 | fp8-block | modelslim-w4a8 | gguf")
      ->required()
      ->check(parsed_by([](const std::string& t) { parse_family(t); }));
  cmd->add_option("--out", opt->out, "output directory: new or empty")->required();
  cmd->add_flag("--no-tensors", opt->no_tensors, "write the config files only (k3 check --devices plans from them)");
  return {cmd, [opt] {
            try {
              check_new_output_dir(opt->out);
            } catch (const std::filesystem::filesystem_error& e) {
              throw path_error(e, opt->out);
            }
            const FamilyId family = parse_family(opt->family);
            const Json doc = without_quantization_config(load_json_file(opt->config).value());
            const K3Config config = parse_k3_config(parse_json(doc.dump(), opt->config));
            const WriteSummary s = write_family_headers(family, ShapeOnlySource(config), doc, opt->out,
                                                        opt->no_tensors ? TensorFiles::kNone : TensorFiles::kHeadersOnly);
            if (opt->no_tensors) {
              std::printf("wrote %s: %s config files of %s (%zu tensors, %s, not written)\n", opt->out.c_str(), opt->family.c_str(),
                          opt->config.c_str(), s.tensors, size_text(s.bytes).c_str());
            } else {
              std::printf("wrote %s: %s headers of %s: %zu tensors, %s of payload left unwritten\n", opt->out.c_str(),
                          opt->family.c_str(), opt->config.c_str(), s.tensors, size_text(s.bytes).c_str());
            }
            return 0;
          }};
}

}  // namespace k3::cli
