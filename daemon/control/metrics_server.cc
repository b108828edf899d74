#include "daemon/control/metrics_server.h"

#include <CivetServer.h>

#include <exception>

namespace syncd {
namespace {

// civetweb says why it could not start (the bind error) through its log callback, on the thread
// that constructs the server; the message goes into Start's error.
thread_local std::string start_log;

}  // namespace

StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& address, uint16_t port,
                                                              Collector collect) {
  std::unique_ptr<MetricsServer> server(new MetricsServer(address));
  // IPv6 addresses go in brackets; civetweb takes "ADDRESS:PORT" for IPv4 and "[ADDRESS]:PORT".
  const std::string listen =
      (address.find(':') != std::string::npos ? "[" + address + "]" : address) + ":" + std::to_string(port);
  CivetCallbacks callbacks;
  callbacks.log_message = [](const mg_connection*, const char* message) {
    if (start_log.empty()) start_log = message;
    return 1;  // handled: nothing on civetweb's stderr
  };
  start_log.clear();
  try {
    server->exposer_ = std::make_unique<prometheus::Exposer>(
        std::vector<std::string>{"listening_ports", listen, "num_threads", "2", "request_timeout_ms", "10000"},
        &callbacks);
  } catch (const std::exception& e) {
    return Status(SYNCD_ERR_SYSTEM,
                  "--metrics-port: cannot serve metrics on " + listen + ": " + (start_log.empty() ? e.what() : start_log));
  }
  const std::vector<int> ports = server->exposer_->GetListeningPorts();
  if (ports.empty()) return Status(SYNCD_ERR_SYSTEM, "--metrics-port: civetweb listens on no port for " + listen);
  server->port_ = uint16_t(ports[0]);
  server->source_ = std::make_shared<Source>(std::move(collect));
  server->exposer_->RegisterCollectable(server->source_);
  return server;
}

MetricsServer::~MetricsServer() { exposer_.reset(); }  // before the source it collects from

std::string MetricsServer::url() const {
  const std::string host = address_.find(':') != std::string::npos ? "[" + address_ + "]" : address_;
  return "http://" + host + ":" + std::to_string(port_) + "/metrics";
}

}  // namespace syncd
