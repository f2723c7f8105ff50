#include "server/http/http_server.h"

#include <utility>  // before Asio: Boost 1.74's asio/awaitable.hpp uses std::exchange

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include <algorithm>
#include <future>
#include <optional>
#include <thread>

#include "core/error.h"
#include "server/http/http_connection.h"

namespace k3::server {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using error_code = boost::system::error_code;

namespace {
thread_local bool t_io_thread = false;
}

struct HttpServer::Impl {
  std::string host;
  int requested_port;
  int bound_port = 0;
  int io_threads;
  detail::ServerContext ctx;
  net::io_context ioc;
  net::strand<net::io_context::executor_type> accept_strand{ioc.get_executor()};
  tcp::acceptor acceptor{accept_strand};
  net::steady_timer retry{accept_strand};
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  std::vector<std::thread> threads;
  bool started = false, stopped = false;

  Impl(std::string h, int p, HttpLimits limits, Handler handler, int n)
      : host(std::move(h)), requested_port(p), io_threads(std::max(1, n)), ioc(std::max(1, n)) {
    ctx.limits = limits;
    ctx.handler = std::move(handler);
  }

  void accept() {
    acceptor.async_accept(net::make_strand(ioc), [this](const error_code& ec, tcp::socket socket) {
      if (!acceptor.is_open()) return;
      if (ec) {
        // Out of descriptors and the like: try again shortly rather than spin.
        retry.expires_after(std::chrono::milliseconds(50));
        retry.async_wait([this](const error_code& e) { if (!e && acceptor.is_open()) accept(); });
        return;
      }
      bool rejected = ctx.open.load() >= static_cast<size_t>(std::max(0, ctx.limits.max_connections));
      auto conn = std::make_shared<detail::Connection>(std::move(socket), ctx, rejected);
      {
        std::lock_guard<std::mutex> lock(ctx.m);
        ctx.conns.insert(conn);
      }
      conn->start();
      accept();
    });
  }

  // Runs `f` on the accept strand and waits for it (unless called from an io thread).
  template <class F>
  void on_accept_strand(F f) {
    if (t_io_thread) {
      net::post(accept_strand, std::move(f));
      return;
    }
    std::promise<void> done;
    net::post(accept_strand, [&] { f(); done.set_value(); });
    done.get_future().wait();
  }
};

HttpServer::HttpServer(std::string host, int port, HttpLimits limits, Handler handler, int io_threads)
    : impl_(std::make_unique<Impl>(std::move(host), port, limits, std::move(handler), io_threads)) {}

HttpServer::~HttpServer() { shutdown(); }

void HttpServer::start() {
  Impl& s = *impl_;
  if (s.started) throw Error("HTTP server already started");
  std::string where = s.host + ":" + std::to_string(s.requested_port);
  error_code ec;
  tcp::resolver resolver(s.ioc);
  auto endpoints = resolver.resolve(s.host, std::to_string(s.requested_port),
                                    tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || endpoints.empty()) throw Error("cannot listen on " + where + ": " + (ec ? ec.message() : "no address"));
  tcp::endpoint ep = endpoints.begin()->endpoint();
  s.acceptor.open(ep.protocol(), ec);
  if (!ec) s.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(ep, ec);
  if (!ec) s.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    error_code ignored;
    s.acceptor.close(ignored);
    throw Error("cannot listen on " + where + ": " + ec.message());
  }
  s.bound_port = s.acceptor.local_endpoint().port();
  s.started = true;
  s.work.emplace(s.ioc.get_executor());
  net::post(s.accept_strand, [&s] { s.accept(); });
  for (int i = 0; i < s.io_threads; ++i)
    s.threads.emplace_back([&s] {
      t_io_thread = true;
      s.ioc.run();
    });
}

int HttpServer::port() const { return impl_->bound_port; }

size_t HttpServer::open_connections() const { return impl_->ctx.open.load(); }

void HttpServer::stop_accepting() {
  Impl& s = *impl_;
  s.ctx.draining = true;
  if (!s.started) return;
  s.on_accept_strand([&s] {
    error_code ec;
    s.acceptor.close(ec);
    s.retry.cancel();
  });
}

void HttpServer::shutdown() {
  Impl& s = *impl_;
  if (!s.started || s.stopped) return;
  s.stopped = true;
  stop_accepting();
  std::vector<std::shared_ptr<detail::Connection>> conns;
  {
    std::lock_guard<std::mutex> lock(s.ctx.m);
    conns.assign(s.ctx.conns.begin(), s.ctx.conns.end());
  }
  // The cuts run on the io threads (firing on_close of in-flight exchanges); then the threads stop.
  auto all_cut = std::make_shared<std::promise<void>>();
  auto left = std::make_shared<std::atomic<size_t>>(conns.size() + 1);
  auto one_done = [left, all_cut] {
    if (left->fetch_sub(1) == 1) all_cut->set_value();
  };
  for (auto& c : conns) c->cut(one_done);
  conns.clear();
  auto cut = all_cut->get_future();
  one_done();
  cut.wait_for(std::chrono::seconds(5));
  s.work.reset();
  s.ioc.stop();
  for (auto& t : s.threads) t.join();
  s.threads.clear();
  std::lock_guard<std::mutex> lock(s.ctx.m);
  s.ctx.conns.clear();
}

}  // namespace k3::server
