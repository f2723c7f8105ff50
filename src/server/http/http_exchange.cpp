#include <utility>  // before Asio: Boost 1.74's asio/awaitable.hpp uses std::exchange

#include <boost/asio/post.hpp>

#include <cctype>
#include <cstdio>

#include "server/http/http_connection.h"

namespace k3::server {

std::string HttpRequest::header(std::string_view name) const {
  std::string key(name);
  for (auto& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  auto it = headers.find(key);
  return it == headers.end() ? std::string() : it->second;
}

HttpExchange::HttpExchange(std::weak_ptr<detail::Connection> conn, int version, bool keep_alive)
    : conn_(std::move(conn)), version_(version), keep_alive_(keep_alive) {}

HttpExchange::~HttpExchange() {
  if (ended_.load() || closed_.load()) return;
  auto conn = conn_.lock();
  if (!conn) return;
  if (!started_.load()) conn->queue(detail::error_response(500, version_, false, "the request was dropped"), true, false);
  else conn->cut();
}

bool HttpExchange::queue(std::string bytes, bool end, bool limited) {
  auto conn = conn_.lock();
  if (!conn || closed_.load() || !conn->queue(std::move(bytes), end, limited)) {
    closed_ = true;
    return false;
  }
  return true;
}

void HttpExchange::respond(int status, std::string content_type, std::string body, HttpHeaders extra) {
  if (started_.exchange(true)) return;
  ended_ = true;
  std::string bytes = detail::response_head(status, version_, keep_alive_, content_type,
                                            static_cast<long long>(body.size()), extra);
  bytes += body;
  queue(std::move(bytes), true, false);
}

void HttpExchange::respond_error(int status, std::string message, std::string code) {
  if (started_.exchange(true)) return;
  ended_ = true;
  queue(detail::error_response(status, version_, keep_alive_, message, code), true, false);
}

bool HttpExchange::begin_stream(int status, std::string content_type, HttpHeaders extra) {
  if (started_.exchange(true)) return false;
  streaming_ = true;
  if (version_ < 11) {
    if (auto conn = conn_.lock()) conn->close_after_response();
  }
  return queue(detail::response_head(status, version_, keep_alive_, content_type, -1, extra), false, false);
}

bool HttpExchange::send(std::string data) {
  if (!streaming_.load() || ended_.load() || closed_.load()) return false;
  if (data.empty()) return true;  // an empty chunk would end the stream
  if (version_ < 11) return queue(std::move(data), false, true);
  char size[20];
  int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  std::string chunk;
  chunk.reserve(static_cast<size_t>(n) + data.size() + 2);
  chunk.append(size, static_cast<size_t>(n)).append(data).append("\r\n");
  return queue(std::move(chunk), false, true);
}

void HttpExchange::end_stream() {
  if (!streaming_.load() || ended_.exchange(true)) return;
  queue(version_ < 11 ? std::string() : std::string("0\r\n\r\n"), true, false);
}

void HttpExchange::on_close(std::function<void()> f) {
  {
    std::lock_guard<std::mutex> lock(m_);
    if (!close_fired_) {
      on_close_ = std::move(f);
      return;
    }
  }
  f();  // already gone; called without the lock, which f's own locks may not nest in
}

void HttpExchange::client_gone() {
  closed_ = true;
  std::function<void()> f;
  {
    std::lock_guard<std::mutex> lock(m_);
    if (close_fired_ || ended_.load()) return;
    close_fired_ = true;
    f = std::move(on_close_);
  }
  if (f) f();
}

}  // namespace k3::server
