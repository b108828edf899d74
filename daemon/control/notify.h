// sd_notify(3) without libsystemd: a datagram to $NOTIFY_SOCKET. systemd (Type=notify) and
// syncrun both listen there for READY=1. A no-op when NOTIFY_SOCKET is unset.
#ifndef SYNCD_DAEMON_CONTROL_NOTIFY_H_
#define SYNCD_DAEMON_CONTROL_NOTIFY_H_

#include <string>

namespace syncd {

// `state` is newline-separated KEY=VALUE lines, e.g. "READY=1\nSTATUS=serving".
void NotifyService(const std::string& state);

}  // namespace syncd

#endif  // SYNCD_DAEMON_CONTROL_NOTIFY_H_
