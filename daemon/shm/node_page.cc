#include "daemon/shm/node_page.h"

namespace syncd {

StatusOr<NodePage> NodePage::Create() {
  NodePage n;
  SYNCD_ASSIGN_OR_RETURN(n.mapping_, SharedMapping::Create("syncd-node", 4096));
  abi::NodePage* p = new (n.mapping_.data()) abi::NodePage();
  p->magic = abi::kMagic;
  p->version = abi::kVersion;
  n.Heartbeat();
  n.SetState(abi::DaemonState::kStarting);
  return n;
}

}  // namespace syncd
