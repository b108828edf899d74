// Logging setup: spdlog to stderr with the node rank in every line.
#ifndef SYNCD_DAEMON_BASE_LOGGING_H_
#define SYNCD_DAEMON_BASE_LOGGING_H_

#include <spdlog/spdlog.h>

#include <string>

namespace syncd {

// Call once from main before any thread starts. `level` is one of the config table's names.
void SetupLogging(const std::string& level, uint32_t node_rank);

}  // namespace syncd

#endif  // SYNCD_DAEMON_BASE_LOGGING_H_
