// `k3 logits --model DIR --ids 1,2,3 --out FILE.npy [--threads N]`: one prefill of the prompt;
// writes float32 logits [n_tokens, vocab] for every prompt position. FILE is written atomically and
// may not be one of the checkpoint's files.
#include <cstdio>

#include "io/npy.h"
#include "io/output_file.h"
#include "tools/cli.h"
#include "tools/model_args.h"

namespace k3::cli {

Registered add_logits(CLI::App& app) {
  struct Options {
    ModelArgs model;
    std::string out;
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("logits", "Run one prefill and write the logits of every prompt position to .npy");
  add_model_args(cmd, opt->model);
  cmd->add_option("--out", opt->out, "output .npy file (float32 [n_tokens, vocab])")->required();
  return {cmd, [opt] {
            LoadedModel m = load_model(opt->model);
            check_output_path(opt->out, "--out");  // every input is open by now
            const int64_t seq = m.engine->new_sequence();
            const StepResult r = prefill(*m.engine, seq, m.ids, true, terminal_prefill_progress());
            const uint64_t vocab = static_cast<uint64_t>(m.engine->config().vocab_size);
            write_npy_f32(opt->out, {static_cast<uint64_t>(r.rows), vocab}, r.logits.data());
            std::printf("wrote %s: [%lld, %llu] float32\n", opt->out.c_str(), static_cast<long long>(r.rows),
                        static_cast<unsigned long long>(vocab));
            return 0;
          }};
}

}  // namespace k3::cli
