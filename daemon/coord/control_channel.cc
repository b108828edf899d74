// The control channel of a set's daemons (control_channel.h). Engine thread only.
#include "daemon/coord/control_channel.h"

#include <sched.h>

#include "daemon/transport/tag_space.h"
#include "proto/doorbell.h"

namespace syncd {

ControlChannel::ControlChannel(Transport* counted, Transport* raw) : counted_(counted), raw_(raw) {
  const uint32_t n = counted_->size();
  for (uint32_t p = 0; p < n; ++p) in_.push_back(std::make_shared<Bytes>());
  recvs_.assign(n, 0);
}

ControlChannel::~ControlChannel() {
  for (uint32_t p = 0; p < recvs_.size(); ++p)
    if (p != counted_->rank() && recvs_[p] != 0) counted_->Cancel(recvs_[p]);
  for (Outgoing& o : out_) counted_->Cancel(o.handle);
}

void ControlChannel::Open() {
  for (uint32_t p = 0; p < counted_->size(); ++p)
    if (p != counted_->rank()) Listen(p);
}

void ControlChannel::Listen(uint32_t p) {
  recvs_[p] = counted_->Recv(p, kControlTag, in_[p]->data(), kControlMessageBytes, in_[p]);
}

void ControlChannel::Send(int32_t node, const ControlMessage& m, bool notice) {
  Transport* via = notice ? raw_ : counted_;
  for (uint32_t p = 0; p < counted_->size(); ++p) {
    if (p == counted_->rank() || counted_->PeerLost(p) || (node >= 0 && p != uint32_t(node))) continue;
    Outgoing& out = out_.emplace_back();
    out.bytes = std::make_shared<Bytes>();
    EncodeControl(m, out.bytes->data());
    out.handle = via->Send(p, kControlTag, out.bytes->data(), kControlMessageBytes, out.bytes);
  }
}

bool ControlChannel::Reap() {
  for (auto it = out_.begin(); it != out_.end();) {
    Status err;  // a failed send: the peer is lost, which its own loss reports
    if (counted_->Test(it->handle, &err) == CommState::kPending) ++it;
    else it = out_.erase(it);
  }
  return !out_.empty();
}

bool ControlChannel::Flush(uint64_t deadline_ns) {
  while (!out_.empty() && abi::MonotonicNs() < deadline_ns) {
    counted_->Progress();
    if (Reap()) sched_yield();
  }
  return out_.empty();
}

std::vector<ControlChannel::Incoming>& ControlChannel::Receive() {
  std::vector<Incoming>& in = arrived_;
  in.clear();
  for (uint32_t p = 0; p < recvs_.size(); ++p) {
    if (p == counted_->rank() || recvs_[p] == 0) continue;
    Status err;
    const CommState s = counted_->Test(recvs_[p], &err);
    if (s == CommState::kPending) continue;
    recvs_[p] = 0;
    if (s == CommState::kFailed) {
      in.push_back(Incoming{p, true, std::move(err)});
      continue;
    }
    StatusOr<ControlMessage> m = DecodeControl(in_[p]->data(), kControlMessageBytes);
    if (m.ok()) Listen(p);
    in.push_back(Incoming{p, false, std::move(m)});
  }
  return in;
}

}  // namespace syncd
