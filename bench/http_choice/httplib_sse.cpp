// Prototype SSE server on cpp-httplib 0.11: a chunked content provider per request, running on the
// connection's worker thread, blocks until the producer hands it the next event.
// Usage: httplib_sse PORT EVENTS [POOL_THREADS]
#include <httplib.h>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include "sse_common.h"

struct BlockingStream : Stream {
  std::mutex m;
  std::condition_variable cv;
  std::deque<std::string> q;
  bool last = false;
  std::atomic<bool> gone{false};
  bool deliver(std::string e, bool l) override {
    if (gone) return false;
    { std::lock_guard<std::mutex> g(m); q.push_back(std::move(e)); last = last || l; }
    cv.notify_one();
    return true;
  }
};

int main(int argc, char** argv) {
  int port = std::atoi(argv[1]), events = std::atoi(argv[2]), pool = argc > 3 ? std::atoi(argv[3]) : 1100;
  Hub hub(events, 20);
  httplib::Server svr;
  // One worker per connection for its whole life: 1000 concurrent streams need >= 1000 workers.
  svr.new_task_queue = [pool] { return new httplib::ThreadPool(pool); };
  svr.set_read_timeout(10, 0);
  svr.set_payload_max_length(8 << 20);
  svr.Get("/events", [&](const httplib::Request&, httplib::Response& res) {
    auto st = std::make_shared<BlockingStream>();
    hub.add(st);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", [st](size_t, httplib::DataSink& sink) {
      std::unique_lock<std::mutex> l(st->m);
      st->cv.wait(l, [&] { return !st->q.empty(); });
      while (!st->q.empty()) {
        std::string e = std::move(st->q.front());
        st->q.pop_front();
        l.unlock();
        if (!sink.write(e.data(), e.size())) { st->gone = true; return false; }
        l.lock();
      }
      if (st->last) sink.done();
      return true;
    });
  });
  std::printf("httplib_sse listening on %d\n", port);
  std::fflush(stdout);
  svr.listen("127.0.0.1", port);
}
