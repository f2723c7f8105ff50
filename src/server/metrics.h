// A small thread-safe Prometheus registry: counters (optionally with one label), gauges and
// histograms with fixed buckets, rendered in the text exposition format (version 0.0.4) in
// registration order: "# HELP", "# TYPE", then the samples; histograms as NAME_bucket{le="…"}
// (cumulative, ending with le="+Inf"), NAME_sum and NAME_count. Values print as the shortest
// decimal that reads back exactly (integers without a fraction).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace k3::server {

class Counter {
 public:
  // `label_value` selects the series when the counter has a label ("" when it has none).
  void inc(double amount = 1, std::string_view label_value = "");
  double value(std::string_view label_value = "") const;

 private:
  friend class MetricsRegistry;
  mutable std::mutex mutex_;
  std::map<std::string, double, std::less<>> series_;
};

class Gauge {
 public:
  void set(double value);
  void add(double amount);
  double value() const;

 private:
  mutable std::mutex mutex_;
  double value_ = 0;
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);  // upper bounds, increasing (+Inf is implicit)
  void observe(double value);
  uint64_t count() const;
  double sum() const;

 private:
  friend class MetricsRegistry;
  mutable std::mutex mutex_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; the last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

class MetricsRegistry {
 public:
  // The returned references stay valid as long as the registry. A counter with a label_name has
  // one series per label value (none until incremented); without one it always renders a sample.
  Counter& counter(const std::string& name, const std::string& help, const std::string& label_name = "");
  Gauge& gauge(const std::string& name, const std::string& help);
  Histogram& histogram(const std::string& name, const std::string& help, std::vector<double> bounds);
  std::string render() const;

 private:
  struct Entry {
    std::string name, help, label;
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
  };
  mutable std::mutex mutex_;
  std::vector<Entry> entries_;
};

// The server's metrics.
struct ServerMetrics {
  ServerMetrics();
  MetricsRegistry registry;
  Counter& requests;  // k3_requests_total{status}: finished requests by HTTP status
  Counter& prompt_tokens;
  Counter& generation_tokens;
  Histogram& time_to_first_token;
  Histogram& inter_token_latency;
  Histogram& e2e_request_latency;
  Gauge& requests_running;
  Gauge& requests_waiting;
  Gauge& kv_blocks_used;
  Gauge& kv_blocks_free;
  Gauge& kda_slots_used;
  Gauge& prefix_cache_blocks;
  Counter& prefix_cache_hit_tokens;
  Counter& prefix_cache_query_tokens;
  Histogram& step_batch_tokens;
  Histogram& step_batch_sequences;
  std::string render() const { return registry.render(); }
};

}  // namespace k3::server
