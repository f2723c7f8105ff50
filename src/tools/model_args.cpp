#include "tools/model_args.h"

#include <charconv>

#include "core/error.h"
#include "quant/families/family.h"

namespace k3::cli {

void add_model_args(CLI::App* cmd, ModelArgs& args) {
  cmd->add_option("--model", args.model, "checkpoint directory (any family)")->required();
  cmd->add_option("--ids", args.ids, "prompt token ids, comma-separated (e.g. 1,2,3)")->required();
  cmd->add_option("--threads", args.threads, "CPU threads (default: all cores)")->check(CLI::NonNegativeNumber);
}

std::vector<int64_t> parse_token_ids(const std::string& text, int64_t vocab) {
  const Where where{"", "", "--ids"};
  std::vector<int64_t> ids;
  size_t start = 0;
  while (true) {
    const size_t end = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, end - start);
    int64_t v = 0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size()) {
      throw Error(where, "'" + item + "' is not an integer token id");
    }
    if (v < 0 || v >= vocab) {
      throw Error(where, "token id " + item + " is out of range [0, " + std::to_string(vocab) + ")");
    }
    ids.push_back(v);
    if (end == text.size()) break;
    start = end + 1;
  }
  return ids;
}

LoadedModel load_model(const ModelArgs& args) {
  const CheckpointDir ckpt = open_checkpoint_dir(args.model);
  if (!ckpt.config) throw Error(Where{ckpt.path("config.json"), "", ""}, "a model directory needs config.json");
  LoadedModel m;
  m.ids = parse_token_ids(args.ids, ckpt.config->vocab_size);
  EngineOptions options;
  options.threads = args.threads;
  m.engine = std::make_unique<Engine>(args.model, options);
  return m;
}

}  // namespace k3::cli
