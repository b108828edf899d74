// Small network helpers shared by the launcher and the tests.
#ifndef SYNCD_DAEMON_BASE_NET_H_
#define SYNCD_DAEMON_BASE_NET_H_

namespace syncd {

// A TCP port on 127.0.0.1 that was free a moment ago (bound, then released for the caller's
// daemon to bind), chosen at random below the kernel's ephemeral port range so that outgoing
// connections do not take it in between; 0 if none could be had.
int FreeLoopbackPort();

}  // namespace syncd

#endif  // SYNCD_DAEMON_BASE_NET_H_
