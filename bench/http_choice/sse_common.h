// Shared by the two prototype SSE servers: one producer thread (as an engine would be) that every
// 20 ms produces one event per live stream, all stamped with the tick's time (a decode step yields
// every sequence's token at once), and hands each to its stream; a stream ends after N events.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline std::string make_event(int i, int64_t t) {
  return "data: {\"id\":\"chatcmpl-0123456789\",\"object\":\"chat.completion.chunk\",\"i\":" +
         std::to_string(i) + ",\"t\":" + std::to_string(t) +
         ",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" token\"}}]}\n\n";
}

// What a transport implements for one stream.
struct Stream {
  virtual ~Stream() = default;
  // Queue one event (last = after it the stream ends). False once the client is gone.
  virtual bool deliver(std::string event, bool last) = 0;
  int sent = 0;
};

class Hub {
 public:
  Hub(int events, int period_ms) : events_(events), period_ms_(period_ms) {
    thread_ = std::thread([this] { run(); });
  }
  ~Hub() { stop_ = true; thread_.join(); }
  void add(std::shared_ptr<Stream> s) { std::lock_guard<std::mutex> l(m_); streams_.push_back(std::move(s)); }

 private:
  void run() {
    auto next = std::chrono::steady_clock::now();
    while (!stop_) {
      next += std::chrono::milliseconds(period_ms_);
      std::this_thread::sleep_until(next);
      std::vector<std::shared_ptr<Stream>> live;
      { std::lock_guard<std::mutex> l(m_); live.swap(streams_); }
      std::vector<std::shared_ptr<Stream>> keep;
      int64_t t = now_ns();
      for (auto& s : live) {
        int i = s->sent++;
        bool last = s->sent >= events_;
        if (s->deliver(make_event(i, t), last) && !last) keep.push_back(s);
      }
      std::lock_guard<std::mutex> l(m_);
      keep.insert(keep.end(), streams_.begin(), streams_.end());
      streams_.swap(keep);
    }
  }
  int events_, period_ms_;
  std::mutex m_;
  std::vector<std::shared_ptr<Stream>> streams_;
  std::thread thread_;
  volatile bool stop_ = false;
};
