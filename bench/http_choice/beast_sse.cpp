// Prototype SSE server on Boost.Beast: io threads run one io_context, a strand per connection,
// chunked response written event by event, an async read kept pending to notice a disconnect.
// Usage: beast_sse PORT EVENTS [IO_THREADS]
#include <optional>
#include <utility>  // (Boost 1.74 asio/awaitable.hpp uses std::exchange without it)
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdio>
#include <deque>
#include <iostream>
#include "sse_common.h"

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

static Hub* g_hub;

class Connection : public Stream, public std::enable_shared_from_this<Connection> {
 public:
  explicit Connection(tcp::socket s) : stream_(std::move(s)) {}
  void start() {
    parser_.emplace();
    parser_->header_limit(16 << 10);
    parser_->body_limit(8 << 20);
    stream_.expires_after(std::chrono::seconds(10));  // the whole request, slowloris-proof
    http::async_read(stream_, buf_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
  }
  bool deliver(std::string event, bool last) override {
    if (gone_) return false;
    net::post(stream_.get_executor(), [self = shared_from_this(), e = std::move(event), last]() mutable {
      if (self->gone_) return;
      self->queue_.push_back(std::move(e));
      if (last) self->last_ = true;
      if (!self->writing_) self->write_next();
    });
    return true;
  }

 private:
  void on_read(beast::error_code ec) {
    if (ec) return close();
    stream_.expires_never();
    res_.emplace(http::status::ok, 11);
    res_->set(http::field::content_type, "text/event-stream");
    res_->set(http::field::cache_control, "no-cache");
    res_->chunked(true);
    sr_.emplace(*res_);
    writing_ = true;
    http::async_write_header(stream_, *sr_, [self = shared_from_this()](beast::error_code ec, size_t) {
      self->writing_ = false;
      if (ec) return self->close();
      g_hub->add(self);
      self->watch();
      if (!self->queue_.empty()) self->write_next();
    });
  }
  // A read completing while the response streams means the client closed (or sent junk).
  void watch() {
    stream_.socket().async_read_some(net::buffer(probe_), [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) self->close();
      else self->watch();
    });
  }
  void write_next() {
    if (queue_.empty()) {
      if (last_ && !done_) {
        done_ = true;
        writing_ = true;
        net::async_write(stream_, http::make_chunk_last(), [self = shared_from_this()](beast::error_code ec, size_t) {
          self->writing_ = false;
          // The client closes after the last chunk; the pending watch read then completes.
          if (ec) self->close();
        });
      }
      return;
    }
    writing_ = true;
    net::async_write(stream_, http::make_chunk(net::buffer(queue_.front())),
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       self->writing_ = false;
                       if (ec) return self->close();
                       self->queue_.pop_front();
                       self->write_next();
                     });
  }
  void close() {
    if (gone_) return;
    gone_ = true;
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
  }
  beast::tcp_stream stream_;
  beast::flat_buffer buf_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<http::response<http::empty_body>> res_;
  std::optional<http::response_serializer<http::empty_body>> sr_;
  std::deque<std::string> queue_;
  char probe_[1];
  bool writing_ = false, last_ = false, done_ = false;
  std::atomic<bool> gone_{false};
};

static void do_accept(tcp::acceptor& acc, net::io_context& ioc) {
  acc.async_accept(net::make_strand(ioc), [&](beast::error_code ec, tcp::socket s) {
    if (!ec) std::make_shared<Connection>(std::move(s))->start();
    do_accept(acc, ioc);
  });
}

int main(int argc, char** argv) {
  int port = std::atoi(argv[1]), events = std::atoi(argv[2]), threads = argc > 3 ? std::atoi(argv[3]) : 2;
  net::io_context ioc(threads);
  tcp::acceptor acc(ioc, {net::ip::make_address("127.0.0.1"), (unsigned short)port});
  acc.listen(net::socket_base::max_listen_connections);
  Hub hub(events, 20);
  g_hub = &hub;
  do_accept(acc, ioc);
  std::vector<std::thread> ts;
  for (int i = 0; i < threads; ++i) ts.emplace_back([&] { ioc.run(); });
  std::printf("beast_sse listening on %d\n", port);
  std::fflush(stdout);
  for (auto& t : ts) t.join();
}
