#include "daemon/control/metrics_server.h"

#include <civetweb.h>

#include <cstring>
#include <mutex>

namespace syncd {
namespace {

// civetweb logs why it could not start (the bind error) through its callback, on the thread that
// calls mg_start2; the message goes into Start's error.
thread_local std::string start_log;

}  // namespace

StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& address, uint16_t port,
                                                              Render render) {
  static std::once_flag init;
  std::call_once(init, [] { mg_init_library(0); });
  std::unique_ptr<MetricsServer> server(new MetricsServer(address, std::move(render)));
  // IPv6 addresses go in brackets; civetweb takes "ADDRESS:PORT" for IPv4 and "[ADDRESS]:PORT".
  const std::string listen =
      (address.find(':') != std::string::npos ? "[" + address + "]" : address) + ":" + std::to_string(port);
  const char* options[] = {"listening_ports", listen.c_str(), "num_threads", "2", "request_timeout_ms", "10000",
                           nullptr};
  mg_callbacks callbacks{};
  callbacks.log_message = [](const mg_connection*, const char* message) {
    if (start_log.empty()) start_log = message;
    return 1;  // handled: nothing on civetweb's stderr
  };
  start_log.clear();
  mg_init_data init_data{&callbacks, nullptr, options};
  char text[256] = "";
  unsigned code = 0;
  mg_error_data error{&code, text, sizeof(text)};
  server->ctx_ = mg_start2(&init_data, &error);
  if (server->ctx_ == nullptr)
    return Status(SYNCD_ERR_SYSTEM, "--metrics-port: cannot serve metrics on " + listen + ": " +
                                        (start_log.empty() ? std::string(text[0] ? text : "civetweb did not start")
                                                           : start_log));
  mg_server_port ports[4];
  const int n = mg_get_server_ports(server->ctx_, 4, ports);
  if (n < 1) return Status(SYNCD_ERR_SYSTEM, "--metrics-port: civetweb listens on no port for " + listen);
  server->port_ = uint16_t(ports[0].port);
  mg_set_request_handler(server->ctx_, "/metrics$", &MetricsServer::Handle, server.get());
  return server;
}

MetricsServer::~MetricsServer() {
  if (ctx_ != nullptr) mg_stop(ctx_);
}

std::string MetricsServer::url() const {
  const std::string host = address_.find(':') != std::string::npos ? "[" + address_ + "]" : address_;
  return "http://" + host + ":" + std::to_string(port_) + "/metrics";
}

int MetricsServer::Handle(mg_connection* conn, void* self) {
  const mg_request_info* req = mg_get_request_info(conn);
  if (strcmp(req->request_method, "GET") != 0 && strcmp(req->request_method, "HEAD") != 0) {
    mg_send_http_error(conn, 405, "%s", "only GET and HEAD\n");
    return 405;
  }
  const std::string body = static_cast<MetricsServer*>(self)->render_();
  mg_send_http_ok(conn, "text/plain; version=0.0.4; charset=utf-8", (long long)body.size());
  if (strcmp(req->request_method, "GET") == 0) mg_write(conn, body.data(), body.size());
  return 200;
}

}  // namespace syncd
