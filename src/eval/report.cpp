#include "eval/report.h"

#include <cstdio>
#include <map>

namespace k3::eval {
namespace {

chat::Json score_json(const TaskScore& s) { return {{"n", s.n}, {"correct", s.correct}, {"accuracy", s.accuracy()}}; }

// {task: score} for the tasks, then the total separately.
chat::Json tasks_json(const EvalResult& r) {
  chat::Json tasks = chat::Json::object();
  for (size_t i = 0; i + 1 < r.scores.size(); ++i) tasks[r.scores[i].task] = score_json(r.scores[i]);
  return tasks;
}

double per_second(double count, double seconds) { return seconds > 0 ? count / seconds : 0.0; }

std::string format(const char* fmt, auto... args) {
  char line[512];
  std::snprintf(line, sizeof line, fmt, args...);
  return line;
}

}  // namespace

chat::Json report_json(const EvalReport& report) {
  const EvalResult& r = report.result;
  chat::Json j = {{"model", report.model}, {"device", report.device}, {"seed", report.seed}};
  j["tasks"] = tasks_json(r);
  j["total"] = score_json(r.scores.back());
  j["throughput"] = {{"seconds", r.seconds},
                     {"generated_tokens", r.generated_tokens},
                     {"examples_per_s", per_second(static_cast<double>(r.examples.size()), r.seconds)},
                     {"tokens_per_s", per_second(static_cast<double>(r.generated_tokens), r.seconds)}};
  j["kl"] = nullptr;
  if (report.kl) {
    const KlSummary& s = report.kl->summary;
    j["kl"] = {{"base", report.kl->base},
               {"positions", s.positions},
               {"mean", s.mean},
               {"p99", s.p99},
               {"max", s.max},
               {"top1_agreement", s.top1_agreement},
               {"base_tasks", tasks_json(report.kl->base_result)},
               {"base_total", score_json(report.kl->base_result.scores.back())}};
  }
  return j;
}

std::string report_table(const EvalReport& report) {
  const EvalResult& r = report.result;
  std::string out = format("k3 eval: %s on %s, seed %llu\n", report.model.c_str(), report.device.c_str(),
                           static_cast<unsigned long long>(report.seed));
  out += format("%-8s %9s %9s %9s\n", "task", "examples", "correct", "accuracy");
  for (const TaskScore& s : r.scores) {
    out += format("%-8s %9lld %9lld %9.4f\n", s.task.c_str(), static_cast<long long>(s.n), static_cast<long long>(s.correct), s.accuracy());
  }
  out += format("throughput: %zu examples, %lld generated tokens in %.2f s: %.2f examples/s, %.1f tokens/s\n", r.examples.size(),
                static_cast<long long>(r.generated_tokens), r.seconds, per_second(static_cast<double>(r.examples.size()), r.seconds),
                per_second(static_cast<double>(r.generated_tokens), r.seconds));
  if (report.kl) {
    const KlSummary& s = report.kl->summary;
    out += format("KL(base || model) over %lld positions of the base's replies: mean %.6g, p99 %.6g, max %.6g, top-1 agreement %.4f\n",
                  static_cast<long long>(s.positions), s.mean, s.p99, s.max, s.top1_agreement);
    out += format("base %s: accuracy %.4f (%lld of %lld)\n", report.kl->base.c_str(), report.kl->base_result.scores.back().accuracy(),
                  static_cast<long long>(report.kl->base_result.scores.back().correct),
                  static_cast<long long>(report.kl->base_result.scores.back().n));
  }
  return out;
}

std::string failures_text(const EvalResult& result, size_t per_task) {
  std::string out;
  std::map<Task, size_t> shown;
  for (size_t i = 0; i < result.examples.size(); ++i) {
    const Example& e = result.examples[i];
    if (result.results[i].correct || shown[e.task]++ >= per_task) continue;
    out += std::string(task_name(e.task)) + ": prompt " + chat::json_string(e.prompt) + "\n  expected " + chat::json_string(e.answer) +
           "\n  got      " + chat::json_string(result.results[i].content) + "\n  reply    " +
           chat::json_string(result.results[i].text) + "\n";
  }
  return out;
}

}  // namespace k3::eval
