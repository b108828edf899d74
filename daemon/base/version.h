#ifndef SYNCD_DAEMON_BASE_VERSION_H_
#define SYNCD_DAEMON_BASE_VERSION_H_

namespace syncd {
inline constexpr const char* kVersionString = SYNCD_VERSION;  // set by CMake from project()
}

#endif  // SYNCD_DAEMON_BASE_VERSION_H_
