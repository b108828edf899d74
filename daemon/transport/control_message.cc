#include "daemon/transport/control_message.h"

#include <algorithm>
#include <cstring>
#include <string_view>

#include "daemon/base/version.h"

namespace syncd {

void EncodeControl(const ControlMessage& m, char* out) {
  memset(out, 0, kControlMessageBytes);
  out[0] = char(m.kind);
  memcpy(out + 1, &m.job, 8);
  memcpy(out + 9, &m.cycle, 8);
  memcpy(out + 17, &m.code, 4);
  out[21] = char(kWireVersion);
  memcpy(out + 22, m.text.data(), std::min(m.text.size(), kControlTextBytes));
}

StatusOr<ControlMessage> DecodeControl(const char* bytes, size_t n) {
  if (n != kControlMessageBytes)
    return ProtocolError("control message of " + std::to_string(n) + " bytes, expected " +
                         std::to_string(kControlMessageBytes));
  ControlMessage m;
  m.kind = ControlMessage::Kind(bytes[0]);
  if (std::string_view("ALCHRPQNXYTUBJDKSG").find(bytes[0]) == std::string_view::npos)
    return ProtocolError("control message of unknown kind " + std::to_string(int(uint8_t(bytes[0]))));
  if (uint8_t(bytes[21]) != kWireVersion)
    return ProtocolError(WrongWireVersion("control message", uint8_t(bytes[21])));
  memcpy(&m.job, bytes + 1, 8);
  memcpy(&m.cycle, bytes + 9, 8);
  memcpy(&m.code, bytes + 17, 4);
  m.text.assign(bytes + 22, strnlen(bytes + 22, kControlTextBytes));
  return m;
}

}  // namespace syncd
