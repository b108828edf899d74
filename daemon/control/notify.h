// sd_notify(3) without libsystemd: a datagram to $NOTIFY_SOCKET. systemd (Type=notify) and
// syncrun both listen there for READY=1. A no-op when NOTIFY_SOCKET is unset.
#ifndef SYNCD_DAEMON_CONTROL_NOTIFY_H_
#define SYNCD_DAEMON_CONTROL_NOTIFY_H_

#include <cstdint>
#include <string>

namespace syncd {

// `state` is newline-separated KEY=VALUE lines, e.g. "READY=1\nSTATUS=serving".
void NotifyService(const std::string& state);

// systemd's watchdog (WatchdogSec=): the interval in microseconds within which this process must
// send WATCHDOG=1, from WATCHDOG_USEC; 0 when there is none or WATCHDOG_PID names another process.
uint64_t WatchdogIntervalUs();

// The watchdog is fed only while the engine is healthy: its heartbeat (refreshed every
// millisecond while it works, and at least every 50 ms while it sleeps or waits in a collective)
// is younger than half the interval. A stuck engine stops the pings and systemd restarts the unit.
inline bool EngineHealthy(uint64_t heartbeat_ns, uint64_t now_ns, uint64_t interval_us) {
  return now_ns < heartbeat_ns || now_ns - heartbeat_ns < interval_us * 500;
}

}  // namespace syncd

#endif  // SYNCD_DAEMON_CONTROL_NOTIFY_H_
