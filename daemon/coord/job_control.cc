// What the job's control channel (control_channel.h) means to coordination: the messages outside
// any cycle (abort, leave, a cycle wanted), the notices it hands on, and the ends of a job they
// bring (Break, Abort, a peer leaving, this node leaving).
#include <sched.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "daemon/coord/negotiator.h"
#include "proto/doorbell.h"

namespace syncd {
namespace {


// The status an abort from another node carries: its own when it is one (a stall says STALLED
// everywhere), else RANK_LOST.
syncd_status AbortCode(int32_t code) {
  return code > SYNCD_OK && code <= SYNCD_ERR_STALLED && code != SYNCD_IN_PROGRESS ? syncd_status(code) : SYNCD_ERR_RANK_LOST;
}

bool IsNotice(ControlMessage::Kind k) {
  using K = ControlMessage::Kind;
  return k == K::kHealth || k == K::kTimelineStart || k == K::kTimelineStop || k == K::kClockPing || k == K::kClockPong ||
         k == K::kNodeBack || k == K::kNodeJoin || k == K::kNodeRestarted || k == K::kNodeAddress;
}

}  // namespace

void Negotiator::Break(Status why, bool expected) { EndJob(std::move(why), /*tell_peers=*/false, expected); }

void Negotiator::Abort(Status why) { EndJob(std::move(why), /*tell_peers=*/true); }

void Negotiator::EndJob(Status why, bool tell_peers, bool expected) {
  if (broken_) return;
  broken_ = true;
  failure_ = why;
  if (!expected) spdlog::error("job {}: {}", tell_peers ? "aborted" : "failed", why.message());
  CancelCycle(why);
  if (tell_peers) SendControl(ControlMessage{ControlMessage::Kind::kAbort, options_.job, 0, why.message(), why.code()});
  for (const std::string& name : pending_.Names())
    TakeAndFail(name, Status(why.code(), "tensor '" + name + "': " + why.message()));
}

void Negotiator::RequestCycle(uint64_t cycle) {
  ++stats_.cycle_requests;
  SendControl(ControlMessage{ControlMessage::Kind::kCycle, options_.job, cycle, ""});
}

void Negotiator::Tell(int32_t node, ControlMessage m) {
  // The engine's notices are not coordination: they do not count as its messages.
  control_.Send(node, m, IsNotice(m.kind));
}

void Negotiator::PeerLeft(uint32_t node, const std::string& reason) {
  const std::string who = "node " + std::to_string(node) + " left the job (" + reason + ")";
  if (pending_.empty() && !handoff_.busy()) {
    // The normal end of a job: every daemon is being stopped, or has moved on to the next job.
    // Nothing is lost, so nothing is reported as an error, but this job cannot go on.
    spdlog::info("{}", who);
    broken_ = true;
    failure_ = Status(SYNCD_ERR_RANK_LOST, who);
    CancelCycle(failure_);  // an idle cycle may be waiting on that node
    return;
  }
  Abort(Status(SYNCD_ERR_RANK_LOST, who + " while " + std::to_string(pending_.size()) + " tensor(s) were pending"));
}

bool Negotiator::Leave(uint64_t deadline_ns, const std::string& why, const std::string& peer_reason) {
  if (!broken_) {
    broken_ = true;
    // This daemon leaves: what it still holds fails as its clients' other requests do when their
    // daemon stops (DAEMON_LOST), not as a lost rank's.
    failure_ = Status(SYNCD_ERR_DAEMON_LOST, why);
    CancelCycle(failure_);
    for (const std::string& name : pending_.Names()) TakeAndFail(name, Status(SYNCD_ERR_DAEMON_LOST, "tensor '" + name + "': " + why));
    SendControl(ControlMessage{ControlMessage::Kind::kLeave, options_.job, 0, peer_reason});
  }
  while (abi::MonotonicNs() < deadline_ns && control_.Reap()) {
    t_->Progress();
    CheckAbortMessages();
    sched_yield();
  }
  return !control_.Reap();
}

bool Negotiator::CheckAbortMessages() {
  control_.Reap();  // a failed send means a lost peer: PeerFailure() reports it below
  if (broken_) return false;
  t_->Progress();
  std::vector<ControlChannel::Incoming>& in = control_.Receive();
  for (ControlChannel::Incoming& i : in) {
    const uint32_t p = i.from;
    StatusOr<ControlMessage>& m = i.message;
    if (!m.ok()) {
      // The peer itself is lost (its receive failed), or it broke the protocol.
      Abort(i.lost ? m.status()
                 : Status(SYNCD_ERR_PROTOCOL, "node " + std::to_string(p) + " broke the coordination protocol: " +
                                                  m.status().message()));
      break;
    }
    using K = ControlMessage::Kind;
    const bool set = m->kind == K::kPartialReport || m->kind == K::kPartialRun || m->kind == K::kTopoJoined ||
                     m->kind == K::kTopoRun;
    if (set || IsNotice(m->kind)) {  // the process set's and the engine's
      if (m->job == options_.job) notices_.push_back(ControlNotice{p, std::move(*m)});
      continue;
    }
    if (m->job != options_.job || m->kind == ControlMessage::Kind::kCycle) {
      // A notice about another job (sent before this one started here) means nothing to it.
      if (m->job == options_.job) clock_.Wanted(m->cycle);
      continue;
    }
    if (m->kind == ControlMessage::Kind::kLeave) PeerLeft(p, m->text);
    else if (m->kind == ControlMessage::Kind::kAbort)
      Abort(Status(AbortCode(m->code), "node " + std::to_string(p) + " aborted the job: " + m->text));
    else
      Abort(Status(SYNCD_ERR_PROTOCOL, "node " + std::to_string(p) + " sent a control message of kind '" +
                                           std::string(1, char(m->kind)) + "' this set does not expect"));
    break;
  }
  bool did = !in.empty();
  if (!broken_)
    if (std::optional<Status> lost = t_->PeerFailure()) {
      Abort(*lost);
      did = true;
    }
  return did;
}

}  // namespace syncd
