// The metrics endpoint (--metrics-port): GET /metrics answers the text exposition of a fresh
// status snapshot's metrics (obs/prometheus.h). prometheus-cpp's Exposer serves it on civetweb's
// threads (two), off the engine thread; each scrape collects from a source that asks the engine
// for a snapshot, as `syncctl status` does.
#ifndef SYNCD_DAEMON_CONTROL_METRICS_SERVER_H_
#define SYNCD_DAEMON_CONTROL_METRICS_SERVER_H_

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "daemon/base/status.h"

namespace syncd {

class MetricsServer {
 public:
  using Collector = std::function<std::vector<prometheus::MetricFamily>()>;

  // Listens on address:port (port 0: any free port; port() says which). Errors name the address.
  static StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& address, uint16_t port, Collector collect);
  ~MetricsServer();  // stops serving; a scrape in progress finishes first

  uint16_t port() const { return port_; }
  std::string url() const;  // http://ADDRESS:PORT/metrics

 private:
  // What each scrape collects from (the Exposer holds it weakly).
  class Source final : public prometheus::Collectable {
   public:
    explicit Source(Collector collect) : collect_(std::move(collect)) {}
    std::vector<prometheus::MetricFamily> Collect() const override { return collect_(); }

   private:
    Collector collect_;
  };

  explicit MetricsServer(std::string address) : address_(std::move(address)) {}

  std::string address_;
  std::shared_ptr<Source> source_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  uint16_t port_ = 0;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_CONTROL_METRICS_SERVER_H_
