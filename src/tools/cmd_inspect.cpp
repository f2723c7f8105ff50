// `k3 inspect PATH`: metadata and tensors of a safetensors file, checkpoint directory or GGUF.
#include "tools/cli.h"

namespace k3::cli {

Registered add_inspect(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "List metadata and tensors of a checkpoint file or directory");
  return {cmd, [] { return 0; }};
}

}  // namespace k3::cli
