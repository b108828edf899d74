// Small network helpers shared by the launcher and the tests.
#ifndef SYNCD_DAEMON_BASE_NET_H_
#define SYNCD_DAEMON_BASE_NET_H_

namespace syncd {

// A TCP port that was free on every address a moment ago (bound on the wildcard, then released
// for the caller's daemon or torch's store to bind, which may bind the wildcard: a port held on
// some other address would fail it), chosen at random below the kernel's ephemeral port range
// so that outgoing connections do not take it in between; 0 if none could be had.
int FreeTcpPort();

}  // namespace syncd

#endif  // SYNCD_DAEMON_BASE_NET_H_
