// The metrics endpoint (--metrics-port): GET /metrics answers Prometheus' text exposition of a
// fresh status snapshot. civetweb serves it on its own threads (two), off the engine thread; each
// scrape asks the engine for a snapshot like `syncctl status` does.
#ifndef SYNCD_DAEMON_CONTROL_METRICS_SERVER_H_
#define SYNCD_DAEMON_CONTROL_METRICS_SERVER_H_

#include <functional>
#include <memory>
#include <string>

#include "daemon/base/status.h"

struct mg_context;
struct mg_connection;

namespace syncd {

class MetricsServer {
 public:
  using Render = std::function<std::string()>;

  // Listens on address:port (port 0: any free port; port() says which). Errors name the address.
  static StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& address, uint16_t port, Render render);
  ~MetricsServer();  // stops serving; a scrape in progress finishes first

  uint16_t port() const { return port_; }
  std::string url() const;  // http://ADDRESS:PORT/metrics

 private:
  MetricsServer(std::string address, Render render) : address_(std::move(address)), render_(std::move(render)) {}
  static int Handle(::mg_connection* conn, void* self);

  std::string address_;
  Render render_;
  mg_context* ctx_ = nullptr;
  uint16_t port_ = 0;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_CONTROL_METRICS_SERVER_H_
