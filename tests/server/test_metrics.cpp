// The Prometheus registry: exact exposition text, labels, buckets, concurrent updates.
#include <gtest/gtest.h>

#include <thread>

#include "server/metrics.h"

namespace k3::server {
namespace {

TEST(Metrics, RendersTheTextFormat) {
  MetricsRegistry r;
  Counter& requests = r.counter("k3_requests_total", "Requests.", "status");
  Counter& tokens = r.counter("k3_tokens_total", "Tokens.");
  Gauge& running = r.gauge("k3_running", "Running.");
  Histogram& latency = r.histogram("k3_latency_seconds", "Latency.", {0.1, 0.5, 1});
  requests.inc(1, "200");
  requests.inc(2, "400");
  requests.inc(1, "200");
  tokens.inc(5);
  running.set(3);
  running.add(-1.5);
  latency.observe(0.1);  // le is inclusive
  latency.observe(0.3);
  latency.observe(7);
  EXPECT_EQ(r.render(),
            "# HELP k3_requests_total Requests.\n"
            "# TYPE k3_requests_total counter\n"
            "k3_requests_total{status=\"200\"} 2\n"
            "k3_requests_total{status=\"400\"} 2\n"
            "# HELP k3_tokens_total Tokens.\n"
            "# TYPE k3_tokens_total counter\n"
            "k3_tokens_total 5\n"
            "# HELP k3_running Running.\n"
            "# TYPE k3_running gauge\n"
            "k3_running 1.5\n"
            "# HELP k3_latency_seconds Latency.\n"
            "# TYPE k3_latency_seconds histogram\n"
            "k3_latency_seconds_bucket{le=\"0.1\"} 1\n"
            "k3_latency_seconds_bucket{le=\"0.5\"} 2\n"
            "k3_latency_seconds_bucket{le=\"1\"} 2\n"
            "k3_latency_seconds_bucket{le=\"+Inf\"} 3\n"
            "k3_latency_seconds_sum 7.4\n"
            "k3_latency_seconds_count 3\n");
  EXPECT_EQ(requests.value("200"), 2);
  EXPECT_EQ(requests.value("500"), 0);
  EXPECT_EQ(latency.count(), 3u);
  EXPECT_THROW(Histogram({1, 1}), std::invalid_argument);
}

TEST(Metrics, EscapesLabelValues) {
  MetricsRegistry r;
  r.counter("c", "C.", "l").inc(1, "a\"b\\c\nd");
  EXPECT_EQ(r.render(), "# HELP c C.\n# TYPE c counter\nc{l=\"a\\\"b\\\\c\\nd\"} 1\n");
}

TEST(Metrics, ServerMetricsAreAllThere) {
  ServerMetrics m;
  m.requests.inc(1, "200");
  m.step_batch_tokens.observe(3);
  const std::string text = m.render();
  for (const char* name :
       {"k3_requests_total{status=\"200\"} 1", "k3_prompt_tokens_total 0", "k3_generation_tokens_total 0",
        "k3_time_to_first_token_seconds_count 0", "k3_inter_token_latency_seconds_bucket{le=\"0.01\"} 0",
        "k3_e2e_request_latency_seconds_bucket{le=\"+Inf\"} 0", "k3_requests_running 0", "k3_requests_waiting 0",
        "k3_kv_blocks_used 0", "k3_kv_blocks_free 0", "k3_kda_slots_used 0", "k3_prefix_cache_blocks 0",
        "k3_prefix_cache_hit_tokens_total 0",
        "k3_prefix_cache_query_tokens_total 0", "k3_step_batch_tokens_bucket{le=\"2\"} 0",
        "k3_step_batch_tokens_bucket{le=\"4\"} 1", "k3_step_batch_tokens_bucket{le=\"8192\"} 1",
        "k3_step_batch_sequences_bucket{le=\"256\"} 0", "# TYPE k3_step_batch_sequences histogram"})
    EXPECT_NE(text.find(std::string(name) + "\n"), std::string::npos) << name;
}

TEST(Metrics, ConcurrentUpdates) {
  ServerMetrics m;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        m.generation_tokens.inc();
        m.requests.inc(1, i % 2 ? "200" : "400");
        m.inter_token_latency.observe(0.02);
        m.requests_running.add(1);
        if (i % 100 == 0) m.render();
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(m.generation_tokens.value(), 4000);
  EXPECT_EQ(m.requests.value("200"), 2000);
  EXPECT_EQ(m.inter_token_latency.count(), 4000u);
  EXPECT_EQ(m.requests_running.value(), 4000);
}

}  // namespace
}  // namespace k3::server
