// Sleeping on several transports at once (transport.h).
#include "daemon/transport/transport.h"

#include <time.h>

namespace syncd {

bool Transport::WaitForEvents(Transport* const* transports, size_t n, uint64_t timeout_ns, int wake_fd) {
  // Kept from sleep to sleep: an idle engine sleeps between two collectives.
  thread_local std::vector<pollfd> fds;
  thread_local std::vector<size_t> firsts;
  fds.clear();
  firsts.clear();
  if (wake_fd >= 0) fds.push_back(pollfd{wake_fd, POLLIN, 0});
  for (size_t i = 0; i < n; ++i) {
    firsts.push_back(fds.size());
    switch (transports[i]->ArmForSleep(&fds)) {
      case Arm::kArmed: break;
      case Arm::kBusy: return true;  // something came in: no sleep, but no polling either
      case Arm::kCannot: return false;
    }
  }
  const timespec ts{time_t(timeout_ns / 1'000'000'000), long(timeout_ns % 1'000'000'000)};
  if (ppoll(fds.data(), fds.size(), &ts, nullptr) > 0)
    for (size_t i = 0; i < n; ++i) {
      const size_t end = i + 1 < n ? firsts[i + 1] : fds.size();
      transports[i]->Woken(fds.data() + firsts[i], end - firsts[i]);
    }
  return true;
}

}  // namespace syncd
