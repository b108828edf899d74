#include "daemon/engine/point_to_point.h"

#include <spdlog/spdlog.h>

#include <cstring>

#include "daemon/base/version.h"
#include "proto/doorbell.h"
#include "proto/status_names.h"

namespace syncd {
namespace {

std::string RankName(int64_t rank) { return rank < 0 ? "any rank" : "rank " + std::to_string(rank); }

std::string Describe(const Request& r) {
  return std::string(r.kind == abi::OpKind::kSend ? "send" : "recv") + " of tensor '" + r.name + "' (" +
         (r.kind == abi::OpKind::kSend ? "rank " + std::to_string(r.rank) + " to " + RankName(r.peer)
                                       : RankName(r.peer) + " to rank " + std::to_string(r.rank)) +
         ", tag " + std::to_string(r.tag) + ")";
}


bool Takes(const Request& recv, const P2pHeader& h) {
  return h.dst == int32_t(recv.rank) && h.set == recv.process_set && h.tag == recv.tag &&
         (recv.peer == -1 || recv.peer == h.src);
}

}  // namespace

void PointToPoint::BeginJob(Links links) {
  links_ = std::move(links);
  const uint32_t nodes = links_.transport ? links_.transport->size() : 1;
  headers_.assign(nodes, HeaderSlot{});
  next_seq_.assign(nodes, 0);
  started_ = false;
}

bool PointToPoint::FromAfar(const Request& r) const {
  if (links_.transport == nullptr) return false;
  return r.peer == -1 ? links_.transport->size() > 1 : NodeOf(uint32_t(r.peer)) != links_.node_rank;
}

bool PointToPoint::WaitsOnNetwork() const {
  if (!incoming_.empty() || !outgoing_.empty() || !early_sends_.empty()) return true;
  for (const Request& r : recvs_)
    if (FromAfar(r)) return true;
  return false;
}

void PointToPoint::Add(Request r) {
  if (r.kind == abi::OpKind::kRecv) {
    recvs_.push_back(std::move(r));
    Match();
    return;
  }
  if (NodeOf(uint32_t(r.peer)) != links_.node_rank) {
    if (!early_sends_.empty() || !Started()) {  // in order, after the ones already waiting
      early_sends_.push_back(std::move(r));
      return;
    }
    return Send(std::move(r));
  }
  Offer o;
  o.header.src = int32_t(r.rank);
  o.header.dst = r.peer;
  o.header.set = r.process_set;
  o.header.tag = r.tag;
  o.header.bytes = r.bytes;
  o.header.dtype = uint32_t(r.dtype);
  o.local = std::move(r);
  offers_.push_back(std::move(o));
  ++offers_local_;
  Match();
}

void PointToPoint::Send(Request r) {
  const uint32_t node = NodeOf(uint32_t(r.peer));
  Transfer t;
  t.header_bytes = std::make_shared<P2pHeader>();
  P2pHeader& h = *t.header_bytes;
  h.magic = kP2pMagic;
  h.version = kWireVersion;
  h.src = int32_t(r.rank);
  h.dst = r.peer;
  h.set = r.process_set;
  h.tag = r.tag;
  h.bytes = r.bytes;
  h.seq = next_seq_[node]++;
  h.job = links_.job;
  h.dtype = uint32_t(r.dtype);
  Transport* net = links_.transport;
  t.header = net->Send(node, kP2pHeaderTag, &h, sizeof(h), t.header_bytes);
  if (r.bytes > 0) t.data = net->Send(node, P2pDataTag(h.seq), r.data, r.bytes, r.memory);
  if (links_.ledger != nullptr) links_.ledger->Enter(r, RequestState::kExecuting, abi::MonotonicNs());
  t.request = std::move(r);
  outgoing_.push_back(std::move(t));
}

bool PointToPoint::Match() {
  bool matched = false;
  for (auto recv = recvs_.begin(); recv != recvs_.end();) {
    auto offer = offers_.begin();
    while (offer != offers_.end() && !Takes(*recv, offer->header)) ++offer;
    if (offer == offers_.end()) {
      ++recv;
      continue;
    }
    Request r = std::move(*recv);
    Offer o = std::move(*offer);
    offers_.erase(offer);
    recv = recvs_.erase(recv);
    if (o.local) --offers_local_;
    Deliver(std::move(r), std::move(o));
    matched = true;
  }
  return matched;
}

void PointToPoint::Deliver(Request recv, Offer offer) {
  const P2pHeader& h = offer.header;
  Status outcome(SYNCD_OK, "source " + std::to_string(h.src));
  if (h.bytes != recv.bytes || h.dtype != uint32_t(recv.dtype))
    outcome = Status(SYNCD_ERR_MISMATCH,
                     Describe(recv) + ": rank " + std::to_string(h.src) + " sent " + std::to_string(h.bytes) +
                         " bytes of " + abi::DtypeName(syncd_dtype(h.dtype)) + " but the receive holds " +
                         std::to_string(recv.bytes) + " bytes of " + abi::DtypeName(recv.dtype));
  if (offer.local) {
    if (outcome.ok() && recv.bytes > 0) memcpy(recv.data, offer.local->data, recv.bytes);
    Complete(std::move(*offer.local), Status::Ok());
    Complete(std::move(recv), outcome);
    return;
  }
  Transfer t;
  t.outcome = outcome;
  if (h.bytes > 0) {
    char* into = recv.data;
    BufferOwner owner = recv.memory;
    if (!outcome.ok()) {  // the data must still be taken off the network
      t.scratch = std::make_shared<std::vector<char>>(h.bytes);
      into = t.scratch->data();
      owner = t.scratch;
    }
    t.data = links_.transport->Recv(offer.node, P2pDataTag(h.seq), into, h.bytes, owner);
  }
  if (links_.ledger != nullptr) links_.ledger->Enter(recv, RequestState::kExecuting, abi::MonotonicNs());
  t.request = std::move(recv);
  incoming_.push_back(std::move(t));
}

bool PointToPoint::PollHeaders() {
  Transport* net = links_.transport;
  bool did = false;
  for (uint32_t node = 0; node < headers_.size(); ++node) {
    if (node == links_.node_rank) continue;
    HeaderSlot& slot = headers_[node];
    if (slot.handle != 0) {
      Status err;
      const CommState s = net->Test(slot.handle, &err);
      if (s == CommState::kPending) continue;
      slot.handle = 0;
      did = true;
      if (s == CommState::kFailed) {
        // The node is lost: receives that wait for its ranks alone cannot complete.
        for (auto r = recvs_.begin(); r != recvs_.end();) {
          if (r->peer >= 0 && NodeOf(uint32_t(r->peer)) == node) {
            Complete(*r, Status(err.code() == SYNCD_OK ? SYNCD_ERR_RANK_LOST : err.code(), Describe(*r) + ": " + err.message()));
            r = recvs_.erase(r);
          } else {
            ++r;
          }
        }
        continue;
      }
      const P2pHeader& h = *slot.bytes;
      if (h.magic != kP2pMagic || h.version != kWireVersion || h.job != links_.job || h.dst < 0 ||
          NodeOf(uint32_t(h.dst)) != links_.node_rank || NodeOf(uint32_t(h.src)) != node) {
        spdlog::error("node {} sent a point-to-point header this node cannot take (magic {:#x}, daemon protocol {} "
                      "where this daemon speaks {}, job {:#x}, rank {} to {})",
                      node, h.magic, h.version, kWireVersion, h.job, h.src, h.dst);
      } else {
        Offer o;
        o.header = h;
        o.node = node;
        offers_.push_back(std::move(o));
      }
    }
    bool wanted = false;
    for (const Request& r : recvs_)
      wanted = wanted || (FromAfar(r) && (r.peer == -1 || NodeOf(uint32_t(r.peer)) == node));
    if (!wanted || net->PeerLost(node)) continue;
    if (!slot.bytes || slot.bytes.use_count() > 1) slot.bytes = std::make_shared<P2pHeader>();
    slot.handle = net->Recv(node, kP2pHeaderTag, slot.bytes.get(), sizeof(P2pHeader), slot.bytes);
  }
  return did;
}

bool PointToPoint::PollTransfers(std::vector<Transfer>* transfers) {
  bool did = false;
  for (auto t = transfers->begin(); t != transfers->end();) {
    bool failed = false;
    for (CommHandle* h : {&t->header, &t->data}) {
      if (*h == 0) continue;
      Status err;
      const CommState s = links_.transport->Test(*h, &err);
      if (s == CommState::kPending) continue;
      *h = 0;
      if (s == CommState::kFailed && !failed) {
        failed = true;
        t->outcome = Status(err.code() == SYNCD_OK ? SYNCD_ERR_RANK_LOST : err.code(), Describe(t->request) + ": " + err.message());
      }
    }
    if (failed) {  // the other half, if any, is withdrawn
      for (CommHandle* h : {&t->header, &t->data})
        if (*h != 0) links_.transport->Cancel(*h);
      t->header = t->data = 0;
    }
    if (t->header != 0 || t->data != 0) {
      ++t;
      continue;
    }
    Complete(std::move(t->request), t->outcome);
    t = transfers->erase(t);
    did = true;
  }
  return did;
}

bool PointToPoint::Started() {
  started_ = started_ || !links_.started || links_.started();  // once started, the job stays so
  return started_;
}

bool PointToPoint::Poll() {
  if (links_.transport == nullptr ||
      (recvs_.empty() && incoming_.empty() && outgoing_.empty() && early_sends_.empty()))
    return false;
  if (!Started()) return false;
  bool did = links_.transport->Progress();
  for (; !early_sends_.empty(); did = true) {
    Send(std::move(early_sends_.front()));
    early_sends_.pop_front();
  }
  did |= PollTransfers(&outgoing_);
  did |= PollTransfers(&incoming_);
  if (PollHeaders()) {
    did = true;
    Match();
  }
  return did;
}

std::vector<StallSnapshot> PointToPoint::Waits(uint64_t now_ns, uint64_t min_age_ns, int32_t set) const {
  std::vector<StallSnapshot> out;
  auto add = [&](const Request& r, int32_t peer) {
    if ((set >= 0 && r.process_set != set) || r.received_ns == 0 || now_ns < r.received_ns + min_age_ns) return;
    StallSnapshot s;
    s.name = r.name;
    s.transfer = r.kind == abi::OpKind::kSend ? "send" : "recv";
    s.tag = r.tag;
    s.waiting_s = double(now_ns - r.received_ns) / 1e9;
    if (peer >= 0) s.missing_ranks.push_back(uint32_t(peer));  // a receive from any rank waits for none in particular
    s.submitted_ranks.push_back(r.rank);
    out.push_back(std::move(s));
  };
  for (const Request& r : recvs_) add(r, r.peer);
  for (const Offer& o : offers_)
    if (o.local) add(*o.local, o.header.dst);
  return out;
}

bool PointToPoint::Holds(uint32_t rank) const {
  for (const Request& r : recvs_)
    if (r.rank == rank) return true;
  for (const Offer& o : offers_)
    if (o.local && o.local->rank == rank) return true;
  for (const Request& r : early_sends_)
    if (r.rank == rank) return true;
  return false;
}

void PointToPoint::FailEarlySends(const std::function<bool(const Request&)>& which, const Status& why) {
  for (auto r = early_sends_.begin(); r != early_sends_.end();) {
    if (!which(*r)) {
      ++r;
      continue;
    }
    Complete(*r, Status(why.code(), Describe(*r) + ": " + why.message()));
    r = early_sends_.erase(r);
  }
}

void PointToPoint::EndRank(uint32_t local_rank, uint32_t rank, const Status& why) {
  (void)local_rank;
  for (auto r = recvs_.begin(); r != recvs_.end();) {
    // A receive from any rank may have waited for this one (as MPI's ULFM fails MPI_ANY_SOURCE).
    const bool own = r->rank == rank, waits_for_it = r->peer == int32_t(rank) || r->peer == -1;
    if (!own && !waits_for_it) {
      ++r;
      continue;
    }
    Complete(*r, Status(why.code(), Describe(*r) + ": " + why.message()));
    r = recvs_.erase(r);
  }
  for (auto o = offers_.begin(); o != offers_.end();) {
    if (o->header.src != int32_t(rank) && o->header.dst != int32_t(rank)) {
      ++o;
      continue;
    }
    if (o->local) {
      Complete(*o->local, Status(why.code(), Describe(*o->local) + ": " + why.message()));
      --offers_local_;
    }
    o = offers_.erase(o);
  }
  FailEarlySends([rank](const Request& r) { return r.rank == rank; }, why);
}

void PointToPoint::EndAll(const Status& why, int32_t set) {
  auto in = [set](int32_t s) { return set < 0 || s == set; };
  auto fail = [&](const Request& r) { Complete(r, Status(why.code(), Describe(r) + ": " + why.message())); };
  FailEarlySends([&in](const Request& r) { return in(r.process_set); }, why);
  for (auto r = recvs_.begin(); r != recvs_.end();) {
    if (!in(r->process_set)) {
      ++r;
      continue;
    }
    fail(*r);
    r = recvs_.erase(r);
  }
  for (auto o = offers_.begin(); o != offers_.end();) {
    if (!in(o->header.set)) {
      ++o;
      continue;
    }
    if (o->local) {
      fail(*o->local);
      --offers_local_;
    }
    o = offers_.erase(o);
  }
  for (std::vector<Transfer>* transfers : {&incoming_, &outgoing_})
    for (auto t = transfers->begin(); t != transfers->end();) {
      if (!in(t->request.process_set)) {
        ++t;
        continue;
      }
      for (CommHandle h : {t->header, t->data})
        if (h != 0) links_.transport->Cancel(h);
      fail(t->request);
      t = transfers->erase(t);
    }
  // Headers are withdrawn only with the job (a header receive that already matched would lose
  // its send, see Transport::Cancel).
  if (set >= 0) return;
  for (HeaderSlot& slot : headers_)
    if (slot.handle != 0) {
      links_.transport->Cancel(slot.handle);
      slot.handle = 0;
    }
}

}  // namespace syncd
