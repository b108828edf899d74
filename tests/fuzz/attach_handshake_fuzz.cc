// The attach handshake (attach_handshake.h): any bytes a process can send on attach.sock, checked
// against a node whose place in the job the first bytes choose.
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
  syncd::abi::AttachRequest req{};
  memcpy(&req, data + 3, std::min(size - 3, sizeof(req)));
  const syncd::Status st = syncd::CheckAttachRequest(req, 1234, rules);
  // Whatever is accepted fits the node exactly.
  if (st.ok()) {
    const uint32_t ls = uint32_t(req.local_size);
    if (ls == 0 || ls > syncd::kMaxLocalSize || uint32_t(req.local_rank) >= ls ||
        uint64_t(req.rank) != uint64_t(rules.node_rank) * ls + uint64_t(req.local_rank) ||
        uint64_t(req.size) != uint64_t(ls) * rules.nodes || (rules.local_size != 0 && ls != rules.local_size))
      __builtin_trap();
  }
  return 0;
}
