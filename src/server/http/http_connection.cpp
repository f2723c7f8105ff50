#include "server/http/http_connection.h"

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/write.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <sstream>
#include <vector>

#include "server/api_error.h"

namespace k3::server::detail {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using error_code = boost::system::error_code;

namespace {

constexpr double kLingerSeconds = 1.0;  // after a final response: wait this long for the client's EOF

template <class Message>
void set_common(Message& m, bool keep_alive, const std::string& content_type, const HttpHeaders& extra) {
  if (!content_type.empty()) m.set(http::field::content_type, content_type);
  for (const auto& [name, value] : extra) m.insert(name, value);
  m.keep_alive(keep_alive);
}

}  // namespace

std::string response_head(int status, int version, bool keep_alive, const std::string& content_type,
                          long long content_length, const HttpHeaders& extra) {
  http::response<http::empty_body> res{static_cast<http::status>(status), version};
  if (content_length >= 0) {
    res.content_length(static_cast<uint64_t>(content_length));
  } else {
    if (version >= 11) res.chunked(true);
    else keep_alive = false;  // HTTP/1.0: the body ends with the connection
    res.set(http::field::cache_control, "no-cache");
  }
  set_common(res, keep_alive, content_type, extra);
  std::ostringstream os;
  os << res.base();
  return os.str();
}

std::string error_response(int status, int version, bool keep_alive, const std::string& message,
                           const std::string& code) {
  std::string body = ApiError(status, message, "", code).body();
  return response_head(status, version, keep_alive, "application/json", static_cast<long long>(body.size()), {}) +
         body;
}

Connection::Connection(net::ip::tcp::socket socket, ServerContext& ctx, bool rejected)
    : socket_(std::move(socket)), timer_(socket_.get_executor()), ctx_(ctx), rejected_(rejected) {
  if (!rejected_) ctx_.open.fetch_add(1);
}

Connection::~Connection() {
  if (!rejected_) ctx_.open.fetch_sub(1);
}

void Connection::new_parser() {
  parser_.emplace();
  parser_->header_limit(static_cast<std::uint32_t>(std::min<size_t>(ctx_.limits.max_header_bytes, UINT32_MAX)));
  parser_->body_limit(ctx_.limits.max_body_bytes);
}

void Connection::start() {
  error_code ec;
  socket_.set_option(net::ip::tcp::no_delay(true), ec);
  new_parser();
  state_ = State::Header;  // the header timeout runs from the accept
  arm(ctx_.limits.header_timeout_s);
  read();
}

void Connection::read() {
  if (reading_ || state_ == State::Closed) return;
  // While a response is out, bytes the client sends ahead wait here, up to one header's worth;
  // beyond that reading pauses (a disconnect is then noticed by the writes).
  if (state_ == State::Responding && in_.size() >= ctx_.limits.max_header_bytes) return;
  reading_ = true;
  // Into a buffer of its own, appended to in_ when the read completes: in_ is consumed (and its bytes
  // moved to its front) while a read is outstanding, which would leave the read's target stale.
  socket_.async_read_some(net::buffer(read_chunk_),
                          [self = shared_from_this()](const error_code& ec, size_t n) { self->on_read(ec, n); });
}

void Connection::on_read(const error_code& ec, size_t n) {
  reading_ = false;
  if (state_ == State::Closed) return;
  if (ec) {
    // A half-closed client still reads the error response this layer is writing.
    if (ec == net::error::eof && state_ == State::Responding && exchange_.expired()) return;
    return close();  // EOF, reset: the client is gone
  }
  const auto room = in_.prepare(n);
  std::memcpy(room.data(), read_chunk_.data(), n);
  in_.commit(n);
  switch (state_) {
    case State::Idle:
      state_ = State::Header;
      arm(ctx_.limits.header_timeout_s);
      return parse();
    case State::Header:
    case State::Body:
      return parse();
    case State::Lingering:
      in_.consume(in_.size());
      return read();
    case State::Responding:
      return read();
    case State::Closed:
      return;
  }
}

void Connection::parse() {
  while (in_.size() > 0) {
    error_code ec;
    size_t used = parser_->put(in_.data(), ec);
    in_.consume(used);
    if (ec == http::error::need_more) break;
    if (ec == http::error::header_limit) return fail(431, "request header too large");
    if (ec == http::error::body_limit)
      return fail(413, "request body over the limit of " + std::to_string(ctx_.limits.max_body_bytes) + " bytes");
    if (ec) return fail(400, "malformed HTTP request: " + ec.message());
    if (state_ == State::Header && parser_->is_header_done() && !on_header()) return;
    if (parser_->is_done()) return dispatch();
    if (used == 0) break;
  }
  read();
}

bool Connection::on_header() {
  if (rejected_) {
    fail(503, "too many connections", "too_many_connections");
    return false;
  }
  if (ctx_.draining.load()) {
    fail(503, "the server is shutting down", "shutting_down");
    return false;
  }
  state_ = State::Body;
  if (!parser_->is_done()) {
    arm(ctx_.limits.body_timeout_s);
    const auto& req = parser_->get();
    auto expect = req[http::field::expect];
    if (req.version() >= 11 && beast::iequals(expect, "100-continue"))
      queue("HTTP/1.1 100 Continue\r\n\r\n", false, false);
  }
  parser_->eager(true);
  return true;
}

void Connection::dispatch() {
  disarm();
  state_ = State::Responding;
  auto msg = parser_->release();
  HttpRequest req;
  req.method = std::string(msg.method_string());
  req.target = std::string(msg.target());
  req.version = msg.version() >= 11 ? 11 : 10;
  for (const auto& f : msg) {
    std::string name(f.name_string());
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    auto [it, fresh] = req.headers.emplace(std::move(name), std::string(f.value()));
    if (!fresh) it->second += ", " + std::string(f.value());
  }
  req.body = std::move(msg.body());
  version_ = req.version;
  keep_alive_ = msg.keep_alive() && !ctx_.draining.load();
  auto exchange = std::make_shared<HttpExchange>(weak_from_this(), version_, keep_alive_);
  exchange_ = exchange;
  read();  // keeps watching for the client going away
  try {
    ctx_.handler(std::move(req), exchange);
  } catch (const ApiError& e) {
    exchange->respond(e.status(), "application/json", e.body());
  } catch (const std::exception& e) {
    exchange->respond_error(500, std::string("internal error: ") + e.what());
  }
}

void Connection::fail(int status, const std::string& message, const std::string& code) {
  disarm();
  state_ = State::Responding;
  keep_alive_ = false;
  exchange_.reset();
  int version = parser_ && parser_->is_header_done() && parser_->get().version() < 11 ? 10 : 11;
  queue(error_response(status, version, false, message, code), true, false);
}

bool Connection::queue(std::string bytes, bool end, bool limited) {
  if (closed_.load()) return false;
  size_t n = bytes.size();
  if (limited && buffered_.load() + n > ctx_.limits.max_stream_buffer_bytes) {
    cut();
    return false;
  }
  std::lock_guard<std::mutex> lock(m_);
  buffered_ += n;
  pending_.push_back(std::move(bytes));
  pending_end_ = pending_end_ || end;
  if (!flush_posted_) {
    flush_posted_ = true;
    net::post(socket_.get_executor(), [self = shared_from_this()] { self->flush(); });
  }
  return true;
}

void Connection::cut(std::function<void()> then) {
  net::post(socket_.get_executor(), [self = shared_from_this(), then = std::move(then)] {
    self->close();
    if (then) then();
  });
}

void Connection::flush() {
  {
    std::lock_guard<std::mutex> lock(m_);
    flush_posted_ = false;
    if (writing_ || state_ == State::Closed) return;
    inflight_.swap(pending_);
    inflight_end_ = pending_end_;
    pending_end_ = false;
  }
  if (inflight_.empty()) return;
  std::vector<net::const_buffer> buffers;
  buffers.reserve(inflight_.size());
  for (const auto& s : inflight_) buffers.emplace_back(s.data(), s.size());
  writing_ = true;
  // While a response is out the timer is free: it bounds the write (a client that stopped reading).
  if (state_ == State::Responding) arm(ctx_.limits.write_timeout_s);
  net::async_write(socket_, buffers, [self = shared_from_this()](const error_code& ec, size_t) { self->on_written(ec); });
}

void Connection::on_written(const error_code& ec) {
  writing_ = false;
  size_t n = 0;
  for (const auto& s : inflight_) n += s.size();
  buffered_ -= n;
  inflight_.clear();
  if (state_ == State::Closed) return;
  if (ec) return close();
  if (state_ == State::Responding) disarm();
  if (inflight_end_) {
    inflight_end_ = false;
    return response_done();
  }
  flush();
}

void Connection::response_done() {
  exchange_.reset();
  if (!keep_alive_ || close_after_.load() || ctx_.draining.load()) return linger();
  next_request();
}

void Connection::next_request() {
  new_parser();
  if (in_.size() > 0) {
    state_ = State::Header;
    arm(ctx_.limits.header_timeout_s);
    return parse();
  }
  state_ = State::Idle;
  arm(ctx_.limits.keep_alive_idle_s);
  read();
}

// After a final response on a closing connection: half-close, then drain what the client still
// sends until its EOF (or a short deadline), so that unread request bytes do not turn the close
// into a reset that could destroy the response before the client reads it.
void Connection::linger() {
  state_ = State::Lingering;
  error_code ec;
  socket_.shutdown(net::ip::tcp::socket::shutdown_send, ec);
  in_.consume(in_.size());
  arm(kLingerSeconds);
  read();
}

void Connection::arm(double seconds) {
  unsigned generation = ++timer_generation_;
  timer_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(seconds)));
  timer_.async_wait([self = shared_from_this(), generation](const error_code& ec) {
    if (ec || generation != self->timer_generation_ || self->state_ == State::Closed) return;
    self->close();  // header, body or idle deadline passed, or the linger ended
  });
}

void Connection::disarm() {
  ++timer_generation_;
  timer_.cancel();
}

void Connection::close() {
  if (state_ == State::Closed) return;
  bool responding = state_ == State::Responding;
  state_ = State::Closed;
  closed_ = true;
  disarm();
  error_code ec;
  socket_.shutdown(net::ip::tcp::socket::shutdown_both, ec);
  socket_.close(ec);
  {
    std::lock_guard<std::mutex> lock(m_);
    pending_.clear();
  }
  if (responding) {
    if (auto x = exchange_.lock()) x->client_gone();
  }
  exchange_.reset();
  std::lock_guard<std::mutex> lock(ctx_.m);
  ctx_.conns.erase(shared_from_this());
}

}  // namespace k3::server::detail
