// The HTTP/1.1 transport of `k3 serve`, over Boost.Beast (docs/decisions/http-library.md): a few io
// threads, no thread per connection. Requests are parsed by Beast with header/body size limits and
// whole-header / whole-body deadlines; a response is either whole (respond) or a chunked stream
// (begin_stream, send, end_stream) fed from any thread. Every error response this layer produces
// itself (400, 413, 431, 503) carries the OpenAI error JSON of ApiError.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>
#include <atomic>

namespace k3::server {

struct HttpLimits {
  size_t max_body_bytes = 8 << 20;           // 413 beyond (a Content-Length is checked before the body)
  size_t max_header_bytes = 16 << 10;        // 431 beyond
  int max_connections = 4096;                // beyond: the request is answered 503 and the connection closed
  double header_timeout_s = 10;              // the whole request header must arrive within this
  double body_timeout_s = 30;                // the whole body within this, after the header
  double keep_alive_idle_s = 60;             // an idle kept-alive connection is closed after this
  double write_timeout_s = 30;               // a response write the client does not take within this cuts it
  size_t max_stream_buffer_bytes = 4 << 20;  // a streaming client this far behind is cut (a disconnect)
};

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method, target;
  std::map<std::string, std::string> headers;  // lowercase names; repeated fields joined with ", "
  std::string body;
  int version = 11;  // 10 or 11
  // The field's value, "" when absent; the name is matched case-insensitively.
  std::string header(std::string_view name) const;
};

namespace detail {
class Connection;
}

// One request/response exchange. Thread-safe: any thread may call its methods (the engine thread
// streams tokens). A response is whole (respond) or streamed (begin_stream, send..., end_stream);
// calls that do not fit (a second response, send before begin_stream or after end) are ignored
// and send returns false. An exchange dropped without a response answers 500; one dropped while
// streaming cuts the connection.
class HttpExchange {
 public:
  HttpExchange(std::weak_ptr<detail::Connection> conn, int version, bool keep_alive);
  ~HttpExchange();
  HttpExchange(const HttpExchange&) = delete;
  HttpExchange& operator=(const HttpExchange&) = delete;

  // A whole response; Content-Length set from the body.
  void respond(int status, std::string content_type, std::string body, HttpHeaders extra = {});
  // An error response: status and body of `error` (the OpenAI error JSON).
  void respond_error(int status, std::string message, std::string code = "");
  // Starts a streamed response: chunked transfer encoding (HTTP/1.1; HTTP/1.0 gets the raw bytes
  // and a close), Cache-Control: no-cache. False when the client is gone or a response started.
  bool begin_stream(int status = 200, std::string content_type = "text/event-stream", HttpHeaders extra = {});
  // Queues bytes on the stream (one chunk). False once the client is gone (the bytes are dropped),
  // or when the client has fallen max_stream_buffer_bytes behind (it is then cut).
  bool send(std::string data);
  // Ends the stream (the last chunk); the connection then serves its next request if kept alive.
  void end_stream();
  // The client disconnected, a write failed or the connection was cut.
  bool closed() const { return closed_.load(); }
  // `f` runs once, on an io thread, when the client goes away before the response ended (at once,
  // in the calling thread, when that already happened). Not called after a response ended.
  void on_close(std::function<void()> f);

  // Called by the connection, on its io thread: the client went away.
  void client_gone();

 private:
  bool queue(std::string bytes, bool end, bool limited);

  std::weak_ptr<detail::Connection> conn_;
  int version_;
  bool keep_alive_;
  std::atomic<bool> started_{false}, streaming_{false}, ended_{false}, closed_{false};
  std::mutex m_;
  std::function<void()> on_close_;
  bool close_fired_ = false;
};

// Runs on an io thread; must not block (hand the exchange to another thread for long work).
using Handler = std::function<void(HttpRequest, std::shared_ptr<HttpExchange>)>;

class HttpServer {
 public:
  // port 0: an ephemeral port (port() tells which after start()).
  HttpServer(std::string host, int port, HttpLimits limits, Handler handler, int io_threads = 2);
  ~HttpServer();  // shutdown()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens, then starts the io threads. Throws k3::Error naming host:port on failure.
  void start();
  int port() const;
  // Drain: closes the listener (new connections are refused) and answers requests that arrive on
  // kept-alive connections 503 with Connection: close; in-flight exchanges go on.
  void stop_accepting();
  // Closes every connection (in-flight exchanges see their client gone), joins the io threads.
  // Not from an io thread. Exchanges must not be used after the server is destroyed.
  void shutdown();
  size_t open_connections() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace k3::server
