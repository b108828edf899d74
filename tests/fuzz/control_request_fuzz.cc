// Control service requests (proto StatusRequest, DrainRequest) as syncctl or anything else on
// control.sock sends them. Status takes no field; a drain's timeout becomes the engine's deadline.
#include "daemon/control/control_service.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  syncd::control::StatusRequest status;
  (void)status.ParseFromArray(data, int(size));
  syncd::control::DrainRequest drain;
  if (!drain.ParseFromArray(data, int(size))) return 0;
  const double timeout_s = syncd::DrainTimeoutS(drain, 30);
  if (!(timeout_s >= 0 && timeout_s <= 86400)) __builtin_trap();
  const uint64_t now = 1'000'000'000;
  const uint64_t deadline = syncd::DrainDeadlineNs(now, drain.timeout_s());
  if (deadline < now || deadline > now + 86400ull * 1'000'000'000) __builtin_trap();
  return 0;
}
