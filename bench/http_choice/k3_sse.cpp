// The same SSE load served by k3's own HttpServer (src/server/http), to check that the transport
// as built keeps the prototype's figures. Usage: k3_sse PORT EVENTS [IO_THREADS]
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "server/http/http_server.h"
#include "sse_common.h"

using namespace k3::server;

struct ExchangeStream : Stream {
  std::shared_ptr<HttpExchange> x;
  bool deliver(std::string event, bool last) override {
    bool ok = x->send(std::move(event));
    if (last) x->end_stream();
    return ok;
  }
};

int main(int argc, char** argv) {
  int port = std::atoi(argv[1]), events = std::atoi(argv[2]), threads = argc > 3 ? std::atoi(argv[3]) : 2;
  Hub hub(events, 20);
  HttpServer server("127.0.0.1", port, HttpLimits{}, [&](HttpRequest, std::shared_ptr<HttpExchange> x) {
    x->begin_stream();
    auto s = std::make_shared<ExchangeStream>();
    s->x = std::move(x);
    hub.add(s);
  }, threads);
  server.start();
  std::printf("k3_sse listening on %d\n", server.port());
  std::fflush(stdout);
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}
