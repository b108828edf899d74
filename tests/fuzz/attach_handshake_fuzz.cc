// The attach handshake (attach_handshake.h): any bytes a process can send on attach.sock, checked
// against a node whose place in the job the first bytes choose; with bit 0x40 of the first, a
// node service with two jobs of two users registered, and the connecting process's uid and gid
// chosen by the high bits of the second and third.
#include <cstring>

#include "daemon/control/attach_handshake.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  syncd::AttachRules rules;
  rules.nodes = 1 + data[0] % 8;
  rules.node_rank = data[1] % rules.nodes;
  rules.local_size = data[2] % 5;  // 0: not fixed yet
  rules.accepting = (data[0] & 0x80) == 0;
  rules.run_dir = "/run/syncd/fuzz";
  static const syncd::JobRegistry* const jobs = [] {
    auto* r = new syncd::JobRegistry;
    syncd::JobAdmission a;
    a.job = 77;
    a.uid = 1000;
    (void)r->Add(a);
    a.job = 78;
    a.uid = 1001;
    a.gid = 50;
    (void)r->Add(a);
    return r;
  }();
  if (data[0] & 0x40) {
    rules.jobs = jobs;
    rules.uid = 1000 + (data[1] >> 4) % 3;
    rules.gid = 50 + (data[2] >> 4) % 2;
  }
  syncd::abi::AttachRequest req{};
  memcpy(&req, data + 3, std::min(size - 3, sizeof(req)));
  const syncd::Status st = syncd::CheckAttachRequest(req, 1234, rules);
  // Whatever is accepted fits the node exactly.
  if (st.ok()) {
    // A node service admits a registered job's own user (and group) only.
    if (rules.jobs != nullptr) {
      const std::optional<syncd::JobAdmission> job = jobs->Find(req.job_id);
      if (!job || job->uid != rules.uid || (job->gid && *job->gid != rules.gid)) __builtin_trap();
    }
    const uint32_t ls = uint32_t(req.local_size);
    if (ls == 0 || ls > syncd::kMaxLocalSize || uint32_t(req.local_rank) >= ls ||
        uint64_t(req.rank) != uint64_t(rules.node_rank) * ls + uint64_t(req.local_rank) ||
        uint64_t(req.size) != uint64_t(ls) * rules.nodes || (rules.local_size != 0 && ls != rules.local_size))
      __builtin_trap();
  }
  return 0;
}
