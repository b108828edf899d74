// Bytes as lowercase hexadecimal text and back: binary values (an NCCL id, a UCX worker address)
// inside the daemons' text control messages.
#ifndef SYNCD_DAEMON_BASE_HEX_H_
#define SYNCD_DAEMON_BASE_HEX_H_

#include <string>

#include "daemon/base/status.h"

namespace syncd {

inline std::string Hex(const std::string& bytes) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

// `what` names the value in the error ("an NCCL id").
inline StatusOr<std::string> Unhex(const std::string& text, const std::string& what) {
  auto nibble = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
  if (text.size() % 2 != 0) return Status(SYNCD_ERR_PROTOCOL, what + " of odd length");
  std::string out;
  out.reserve(text.size() / 2);
  for (size_t i = 0; i < text.size(); i += 2) {
    const int hi = nibble(text[i]), lo = nibble(text[i + 1]);
    if (hi < 0 || lo < 0) return Status(SYNCD_ERR_PROTOCOL, what + " that is not hexadecimal");
    out += char(hi << 4 | lo);
  }
  return out;
}

}  // namespace syncd

#endif  // SYNCD_DAEMON_BASE_HEX_H_
