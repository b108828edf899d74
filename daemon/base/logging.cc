#include "daemon/base/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace syncd {

void SetupLogging(const std::string& level, uint32_t node_rank) {
  auto logger = spdlog::stderr_color_mt("syncd");
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [syncd node " + std::to_string(node_rank) + "] [%^%l%$] %v");
  logger->set_level(spdlog::level::from_str(level));
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

}  // namespace syncd
