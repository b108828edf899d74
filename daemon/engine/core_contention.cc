#include "daemon/engine/core_contention.h"

#include <fcntl.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>

namespace syncd {

CoreContention::~CoreContention() {
  if (fd_ >= 0) close(fd_);
}

bool CoreContention::Open() {
  if (fd_ < 0) fd_ = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
  return fd_ >= 0;
}

bool CoreContention::Sample(uint64_t now_ns) {
  if (fd_ < 0 || now_ns < next_ns_) return false;
  next_ns_ = now_ns + kWindowNs;
  char text[96];
  const ssize_t n = pread(fd_, text, sizeof(text) - 1, 0);
  if (n <= 0) return false;
  text[n] = '\0';
  uint64_t run = 0, delay = 0;
  if (sscanf(text, "%" SCNu64 " %" SCNu64, &run, &delay) != 2) return false;
  if (based_) Update(run - run_ns_, delay - delay_ns_);
  based_ = true;
  run_ns_ = run;
  delay_ns_ = delay;
  return true;
}

void CoreContention::Update(uint64_t run_ns, uint64_t delay_ns) {
  if (run_ns + delay_ns < kMinRunnableNs) return;
  wait_pct_ = 100.0 * double(delay_ns) / double(run_ns + delay_ns);
}

}  // namespace syncd
