// One accepted connection of HttpServer (internal). Everything below runs on the connection's
// strand except queue(), cut() and gone(), which any thread may call. One read is kept pending
// the whole time: it feeds the request parser, waits for the next request on a kept-alive
// connection, and while a response is out notices the client going away (EOF or error).
#pragma once

#include <utility>  // before Asio: Boost 1.74's asio/awaitable.hpp uses std::exchange

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <array>
#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>

#include "server/http/http_server.h"

namespace k3::server::detail {

// What the connections share with their server.
struct ServerContext {
  HttpLimits limits;
  Handler handler;
  std::atomic<bool> draining{false};
  std::atomic<size_t> open{0};  // connections counted against max_connections
  std::mutex m;
  std::unordered_set<std::shared_ptr<Connection>> conns;
};

// An HTTP status line and fields, serialized by Beast: "HTTP/1.x ...\r\n...\r\n\r\n".
// content_length < 0: chunked on HTTP/1.1, no length (close-delimited) on HTTP/1.0.
std::string response_head(int status, int version, bool keep_alive, const std::string& content_type,
                          long long content_length, const HttpHeaders& extra);
// A whole error response with the ApiError JSON body.
std::string error_response(int status, int version, bool keep_alive, const std::string& message,
                           const std::string& code = "");

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  // `rejected`: over max_connections; its request is answered 503.
  Connection(boost::asio::ip::tcp::socket socket, ServerContext& ctx, bool rejected);
  ~Connection();
  void start();

  // Any thread. Queues response bytes; `end`: the response is complete after them. `limited`: a
  // stream chunk, subject to max_stream_buffer_bytes (beyond, the connection is cut). False when
  // the connection is closed (or was cut now).
  bool queue(std::string bytes, bool end, bool limited);
  // Any thread: closes the connection (the client counts as gone), then runs `then` (if any).
  void cut(std::function<void()> then = {});
  bool gone() const { return closed_.load(); }
  // Any thread: the connection closes once the current response is written (a close-delimited body).
  void close_after_response() { close_after_ = true; }

 private:
  enum class State { Idle, Header, Body, Responding, Lingering, Closed };

  void read();
  void on_read(const boost::system::error_code& ec, size_t n);
  void parse();
  bool on_header();
  void dispatch();
  void fail(int status, const std::string& message, const std::string& code = "");
  void flush();
  void on_written(const boost::system::error_code& ec);
  void response_done();
  void next_request();
  void linger();
  void arm(double seconds);
  void disarm();
  void close();
  void new_parser();

  boost::asio::ip::tcp::socket socket_;
  boost::asio::steady_timer timer_;
  unsigned timer_generation_ = 0;
  ServerContext& ctx_;
  bool rejected_;
  State state_ = State::Idle;
  boost::beast::flat_buffer in_;
  std::array<char, 16 << 10> read_chunk_;  // the outstanding read's target (read(), on_read())
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  bool reading_ = false, writing_ = false;
  bool keep_alive_ = false;
  int version_ = 11;
  std::weak_ptr<HttpExchange> exchange_;
  std::deque<std::string> inflight_;  // being written
  bool inflight_end_ = false;

  // Shared with other threads.
  std::mutex m_;
  std::deque<std::string> pending_;
  bool pending_end_ = false, flush_posted_ = false;
  std::atomic<size_t> buffered_{0};
  std::atomic<bool> closed_{false}, close_after_{false};
};

}  // namespace k3::server::detail
