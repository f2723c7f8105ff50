#include "server/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>

namespace k3::server {
namespace {

std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// Label values escape backslash, double quote and newline.
std::string escape_label(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::vector<double> powers_of_two(double last) {
  std::vector<double> b;
  for (double v = 1; v <= last; v *= 2) b.push_back(v);
  return b;
}

}  // namespace

void Counter::inc(double amount, std::string_view label_value) {
  std::lock_guard lock(mutex_);
  auto it = series_.find(label_value);
  if (it == series_.end()) it = series_.emplace(std::string(label_value), 0.0).first;
  it->second += amount;
}

double Counter::value(std::string_view label_value) const {
  std::lock_guard lock(mutex_);
  auto it = series_.find(label_value);
  return it == series_.end() ? 0 : it->second;
}

void Gauge::set(double value) {
  std::lock_guard lock(mutex_);
  value_ = value;
}
void Gauge::add(double amount) {
  std::lock_guard lock(mutex_);
  value_ += amount;
}
double Gauge::value() const {
  std::lock_guard lock(mutex_);
  return value_;
}

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {
  if (!std::is_sorted(bounds_.begin(), bounds_.end()) ||
      std::adjacent_find(bounds_.begin(), bounds_.end()) != bounds_.end())
    throw std::invalid_argument("histogram bounds must increase");
}

void Histogram::observe(double value) {
  const size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();  // value ≤ le
  std::lock_guard lock(mutex_);
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

uint64_t Histogram::count() const {
  std::lock_guard lock(mutex_);
  return count_;
}
double Histogram::sum() const {
  std::lock_guard lock(mutex_);
  return sum_;
}

Counter& MetricsRegistry::counter(const std::string& name, const std::string& help, const std::string& label_name) {
  std::lock_guard lock(mutex_);
  Entry& e = entries_.emplace_back(Entry{name, help, label_name, std::make_unique<Counter>(), nullptr, nullptr});
  if (label_name.empty()) e.counter->inc(0);
  return *e.counter;
}

Gauge& MetricsRegistry::gauge(const std::string& name, const std::string& help) {
  std::lock_guard lock(mutex_);
  return *entries_.emplace_back(Entry{name, help, "", nullptr, std::make_unique<Gauge>(), nullptr}).gauge;
}

Histogram& MetricsRegistry::histogram(const std::string& name, const std::string& help, std::vector<double> bounds) {
  std::lock_guard lock(mutex_);
  auto h = std::make_unique<Histogram>(std::move(bounds));
  return *entries_.emplace_back(Entry{name, help, "", nullptr, nullptr, std::move(h)}).histogram;
}

std::string MetricsRegistry::render() const {
  std::lock_guard lock(mutex_);
  std::string out;
  for (const Entry& e : entries_) {
    const char* type = e.counter ? "counter" : e.gauge ? "gauge" : "histogram";
    out += "# HELP " + e.name + " " + e.help + "\n# TYPE " + e.name + " " + type + "\n";
    if (e.counter) {
      std::lock_guard l(e.counter->mutex_);
      for (const auto& [label, v] : e.counter->series_) {
        const std::string labels = e.label.empty() ? "" : "{" + e.label + "=\"" + escape_label(label) + "\"}";
        out += e.name + labels + " " + number(v) + "\n";
      }
    } else if (e.gauge) {
      out += e.name + " " + number(e.gauge->value()) + "\n";
    } else {
      const Histogram& h = *e.histogram;
      std::lock_guard l(h.mutex_);
      uint64_t cumulative = 0;
      for (size_t i = 0; i <= h.bounds_.size(); ++i) {
        cumulative += h.counts_[i];
        const std::string le = i < h.bounds_.size() ? number(h.bounds_[i]) : "+Inf";
        out += e.name + "_bucket{le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
      }
      out += e.name + "_sum " + number(h.sum_) + "\n";
      out += e.name + "_count " + std::to_string(h.count_) + "\n";
    }
  }
  return out;
}

ServerMetrics::ServerMetrics()
    : requests(registry.counter("k3_requests_total", "Finished requests by HTTP status.", "status")),
      prompt_tokens(registry.counter("k3_prompt_tokens_total", "Prompt tokens of finished requests.")),
      generation_tokens(registry.counter("k3_generation_tokens_total", "Generated tokens.")),
      time_to_first_token(registry.histogram("k3_time_to_first_token_seconds", "Time from arrival to the first token.",
                                             {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                                              2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0})),
      inter_token_latency(registry.histogram("k3_inter_token_latency_seconds", "Time between consecutive tokens of a sequence.",
                                             {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5})),
      e2e_request_latency(registry.histogram("k3_e2e_request_latency_seconds", "Time from arrival to the last token.",
                                             {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                                              60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0})),
      requests_running(registry.gauge("k3_requests_running", "Requests in the running batch.")),
      requests_waiting(registry.gauge("k3_requests_waiting", "Requests queued for admission.")),
      kv_blocks_used(registry.gauge("k3_kv_blocks_used", "MLA cache blocks in use.")),
      kv_blocks_free(registry.gauge("k3_kv_blocks_free", "MLA cache blocks free.")),
      kda_slots_used(registry.gauge("k3_kda_slots_used", "KDA state slots in use.")),
      prefix_cache_blocks(registry.gauge("k3_prefix_cache_blocks", "MLA cache blocks the prefix cache holds (part of k3_kv_blocks_used).")),
      prefix_cache_hit_tokens(registry.counter("k3_prefix_cache_hit_tokens_total", "Prompt tokens served from the prefix cache.")),
      prefix_cache_query_tokens(registry.counter("k3_prefix_cache_query_tokens_total", "Prompt tokens looked up in the prefix cache.")),
      step_batch_tokens(registry.histogram("k3_step_batch_tokens", "Tokens per engine step.", powers_of_two(8192))),
      step_batch_sequences(registry.histogram("k3_step_batch_sequences", "Sequences per engine step.", powers_of_two(256))) {}

}  // namespace k3::server
