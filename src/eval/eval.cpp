#include "eval/eval.h"

#include "core/error.h"
#include "eval/greedy.h"

namespace k3::eval {

std::vector<Example> make_eval_examples(const EvalOptions& options) {
  if (options.n < 1 || options.n > kMaxExamplesPerTask) {
    throw Error(Where{"", "", "--n"}, std::to_string(options.n) + " is out of range [1, " + std::to_string(kMaxExamplesPerTask) + "]");
  }
  std::vector<Example> all;
  for (const Task t : options.tasks) {
    std::vector<Example> some = make_examples(t, options.seed, options.n);
    all.insert(all.end(), std::make_move_iterator(some.begin()), std::make_move_iterator(some.end()));
  }
  return all;
}

ExampleResult score_reply(const Tokenizer& tokenizer, ChatFormat format, std::vector<int64_t> reply, const std::string& answer) {
  ExampleResult x;
  x.reply = std::move(reply);
  x.text = reply_text(tokenizer, x.reply);
  x.content = parsed_content(tokenizer, format, x.reply);
  x.correct = x.content == answer;
  return x;
}

EvalResult run_eval(Engine& engine, const Tokenizer& tokenizer, std::vector<Example> examples, const EvalOptions& options) {
  const ChatFormat format = chat_format_of(engine.config());
  EvalResult r;
  r.examples = std::move(examples);
  std::vector<DecodeJob> jobs;
  for (const Example& e : r.examples) jobs.push_back({prompt_ids(tokenizer, format, e.prompt), reply_token_cap(tokenizer, e.answer)});
  DecodeRun run = greedy_decode(engine, jobs, stop_ids(tokenizer, format, engine.config()), options.max_batch_tokens);
  r.seconds = run.seconds;
  r.generated_tokens = run.generated_tokens;
  TaskScore total{"total"};
  for (size_t i = 0; i < r.examples.size(); ++i) {
    ExampleResult x = score_reply(tokenizer, format, std::move(run.replies[i]), r.examples[i].answer);
    x.prompt = std::move(jobs[i].prompt);
    const std::string name = task_name(r.examples[i].task);
    if (r.scores.empty() || r.scores.back().task != name) r.scores.push_back({name});
    for (TaskScore* s : {&r.scores.back(), &total}) {
      ++s->n;
      s->correct += x.correct;
    }
    r.results.push_back(std::move(x));
  }
  r.scores.push_back(total);
  return r;
}

KlSummary kl_against_base(Engine& base, const EvalResult& base_result, Engine& model, const EvalOptions& options) {
  std::vector<ForcedSequence> sequences;
  for (const ExampleResult& x : base_result.results) sequences.push_back({x.prompt, x.reply});
  ForcingOptions forcing;
  forcing.max_batch_tokens = options.max_batch_tokens;
  return compare_models(base, model, sequences, forcing);
}

}  // namespace k3::eval
