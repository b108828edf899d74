// Control service requests (proto StatusRequest, DrainRequest, AddJobRequest, RemoveJobRequest)
// as syncctl or anything else on control.sock sends them. Status takes no field; a drain's timeout
// becomes the engine's deadline; a registration must admit its own user only.
#include "daemon/control/control_service.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  syncd::control::StatusRequest status;
  (void)status.ParseFromArray(data, int(size));
  syncd::control::AddJobRequest add;
  if (add.ParseFromArray(data, int(size))) {
    syncd::StatusOr<syncd::JobAdmission> a = syncd::AdmissionOf(add.job());
    syncd::JobRegistry jobs;
    if (a.ok() && jobs.Add(*a).ok()) {
      const uint32_t gid = a->gid.value_or(7);
      if (!jobs.Admit(a->job, a->uid, gid).ok()) __builtin_trap();        // its own user
      if (jobs.Admit(a->job, a->uid + 1, gid).ok()) __builtin_trap();     // never another
      if (a->gid && jobs.Admit(a->job, a->uid, gid + 1).ok()) __builtin_trap();
      if (jobs.Admit(a->job + 1, a->uid, gid).ok()) __builtin_trap();     // nor another job
      if (!jobs.Remove(a->job).ok() || jobs.Admit(a->job, a->uid, gid).ok()) __builtin_trap();
    }
  }
  syncd::control::RemoveJobRequest remove;
  (void)remove.ParseFromArray(data, int(size));
  syncd::control::DrainRequest drain;
  if (!drain.ParseFromArray(data, int(size))) return 0;
  const double timeout_s = syncd::DrainTimeoutS(drain, 30);
  if (!(timeout_s >= 0 && timeout_s <= 86400)) __builtin_trap();
  const uint64_t now = 1'000'000'000;
  const uint64_t deadline = syncd::DrainDeadlineNs(now, drain.timeout_s());
  if (deadline < now || deadline > now + 86400ull * 1'000'000'000) __builtin_trap();
  return 0;
}
