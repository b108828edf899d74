// One order of GPU collectives on every node of a `--coord topo` job.
//
// The job's GPUs share one NCCL communicator, and NCCL matches collectives by the order each rank
// issues them in. Under TOPO two sources issue GPU collectives on each daemon: the plan's groups
// (TopoRunner, each daemon on its own as its ranks submit) and the negotiated ones (names outside
// the plan, in agreed cycles). Left alone, node A could issue plan group 7 and then negotiated
// tensor x while node B issues x and then group 7: NCCL would pair group 7 with x, and hang or
// reduce the wrong data. GpuOrder puts every negotiated GPU collective at the same place among the
// plan's GPU groups on every node:
//
//  - Plan GPU groups are counted as they are issued (PlanIssued). The count is the same sequence
//    on every node: the plan's groups, in plan order, step after step.
//  - At each agreement a node that has GPU names pending in the negotiator stops issuing plan GPU
//    groups (Hold) and offers its count; the agreement takes the largest offer (the position).
//    Only such a node can see GPU tensors agreed, since an agreed tensor is pending everywhere.
//  - After the agreement plan GPU groups may go on up to the position (Agreed), and the cycle's
//    negotiated GPU collectives wait until the count reaches it (NegotiatedTurn): every node issues
//    them after exactly `position` plan GPU groups.
//  - When the cycle is done, plan groups go on (Release).
//
// Threads: engine thread only.
#ifndef SYNCD_DAEMON_COORD_GPU_ORDER_H_
#define SYNCD_DAEMON_COORD_GPU_ORDER_H_

#include <cstdint>
#include <optional>
#include <string>

#include "daemon/base/status.h"
#include "daemon/transport/comm_task.h"

namespace syncd {

class GpuOrder {
 public:
  // Plan GPU groups issued so far.
  uint64_t count() const { return count_; }
  bool held() const { return cap_.has_value(); }

  // co_await before issuing a plan GPU group, then call PlanIssued().
  WaitUntil PlanTurn() const {
    WaitUntil w;
    w.ready = [this] { return !cap_ || count_ < *cap_; };
    return w;
  }
  void PlanIssued() { ++count_; }

  // The negotiator's side (see the comment at the top).
  uint64_t Hold() {
    cap_ = count_;
    return count_;
  }
  void Agreed(uint64_t position) {
    if (cap_) cap_ = position;
  }
  void Release() { cap_.reset(); }

  // co_await before issuing a negotiated GPU collective agreed at `position`, then check Turn().
  WaitUntil NegotiatedTurn(uint64_t position) const {
    WaitUntil w;
    w.ready = [this, position] { return count_ >= position; };
    return w;
  }
  // After NegotiatedTurn: an error if this node went past the position (the nodes' orders
  // differ; issuing now would pair different collectives).
  Status Turn(uint64_t position) const {
    if (count_ == position) return Status::Ok();
    return Status(SYNCD_ERR_INTERNAL, "GPU collective order lost: this node issued " + std::to_string(count_) +
                                          " TOPO plan GPU groups where the job agreed on " + std::to_string(position));
  }

  // A new job: nothing of the old plan counts (every node does it at the same point).
  void Reset() {
    count_ = 0;
    cap_.reset();
  }

 private:
  uint64_t count_ = 0;
  std::optional<uint64_t> cap_;  // held: plan GPU groups may be issued while count_ < *cap_
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_COORD_GPU_ORDER_H_
