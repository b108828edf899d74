// Status / StatusOr: the result of every fallible daemon call. Codes are the public syncd_status
// values so an error travels to a client unchanged. The function that detects an error writes
// the message (naming tensor, rank, node); callers pass it up with SYNCD_RETURN_IF_ERROR.
#ifndef SYNCD_DAEMON_BASE_STATUS_H_
#define SYNCD_DAEMON_BASE_STATUS_H_

#include <optional>
#include <string>
#include <utility>

#include "syncd/client.h"

namespace syncd {

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(syncd_status code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == SYNCD_OK; }
  syncd_status code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;

 private:
  syncd_status code_ = SYNCD_OK;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return Status(SYNCD_ERR_INVALID, std::move(m)); }
inline Status ProtocolError(std::string m) { return Status(SYNCD_ERR_PROTOCOL, std::move(m)); }
// "what: strerror(errno)" for a failed OS call.
Status ErrnoError(const std::string& what);

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}           // NOLINT: implicit by design
  StatusOr(Status status) : status_(std::move(status)) {}   // NOLINT: must not be OK
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  T& operator*() { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace syncd

#define SYNCD_RETURN_IF_ERROR(expr)          \
  do {                                       \
    ::syncd::Status _st = (expr);            \
    if (!_st.ok()) return _st;               \
  } while (0)

#define SYNCD_CONCAT_INNER(a, b) a##b
#define SYNCD_CONCAT(a, b) SYNCD_CONCAT_INNER(a, b)
#define SYNCD_ASSIGN_OR_RETURN(lhs, expr) \
  SYNCD_ASSIGN_OR_RETURN_IMPL(SYNCD_CONCAT(_so_, __LINE__), lhs, expr)
#define SYNCD_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()

#endif  // SYNCD_DAEMON_BASE_STATUS_H_
