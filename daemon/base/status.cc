#include "daemon/base/status.h"

#include <cerrno>
#include <cstring>

#include "proto/status_names.h"

namespace syncd {

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(abi::StatusName(code_)) + ": " + message_;
}

Status ErrnoError(const std::string& what) {
  const int e = errno;
  return Status(SYNCD_ERR_SYSTEM, what + ": " + strerror(e));
}

}  // namespace syncd
