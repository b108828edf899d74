#include "daemon/core/request_ledger.h"

#include <cassert>

namespace syncd {

bool RequestLedger::Finish(uint32_t client, uint64_t handle) {
  if (open_.erase({client, handle}) == 1) return true;
  ++refused_;
  assert(false && "a request was completed twice (RequestLedger::Finish)");
  return false;
}

}  // namespace syncd
