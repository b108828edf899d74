// A job on this node (job.h): its process sets, point-to-point, the ranks it lost, and how its
// work ends. Stalls are in stalls.cc, the health view in health.cc. Engine thread only.
#include "daemon/engine/job.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "daemon/engine/engine_timing.h"
#include "daemon/transport/set_transport.h"

namespace syncd {

using engine_timing::kRejoinGraceNs;

Job::Job(const Config& config, uint64_t id, uint32_t local_size, Links links)
    : config_(config), id_(id), local_size_(local_size), links_(std::move(links)) {
  StartHealth(abi::MonotonicNs());
  set_hooks_ = std::move(links_.hooks);
  PointToPoint::Links p2p;
  p2p.transport = links_.transport;
  p2p.job = id;
  p2p.node_rank = config_.node_rank;
  p2p.local_size = local_size_;
  p2p.ledger = set_hooks_.ledger;
  p2p.started = [this] {
    const auto it = sets_.find(0);
    return it != sets_.end() && it->second->Started();
  };
  p2p_.BeginJob(std::move(p2p));
  if (links_.resume != nullptr) {
    Resume(*links_.resume);
    return;
  }
  ProcessSetPlace global =
      ProcessSetPlace::Global(id, local_size_, config_.nodes, config_.node_rank, links_.transport, links_.gpu);
  set_info_[0] = SetInfo{global.ranks, 0, nullptr};
  sets_[0] = std::make_unique<ProcessSet>(config_, std::move(global), links_.counters, set_hooks_);
  StartWithoutVacantRanks();
}

void Job::StartWithoutVacantRanks() {
  const std::vector<uint32_t>& vacant = config_.vacant_ranks;
  if (vacant.empty()) return;
  sets_[0]->StartWithStandIns(int64_t(vacant.size()));
  const uint32_t first = config_.node_rank * local_size_;
  for (uint32_t rank : vacant) {
    if (rank < first || rank >= first + local_size_) continue;
    LostRank& slot = lost_[rank - first];
    slot.reason = "rank " + std::to_string(rank) + " is a vacant slot (--vacant-ranks): no rank has attached in it yet";
    slot.blocking = false;
    slot.continued = slot.vacant = true;
    slot.seq = ++loss_seq_;
    sets_[0]->ContinueWithout(rank - first);
  }
}

Job::~Job() {
  CancelHealth();
  sets_.clear();
}

Status Job::Take(Request&& r) {
  ProcessSet* set = SetOf(r.process_set);
  if (set == nullptr)
    return InvalidArgument("tensor '" + r.name + "': process set " + std::to_string(r.process_set) +
                           " is not one of this job's");
  if (Status why = set->Refusal(); !why.ok()) {
    // The set broke on a lost node this daemon had not looked at yet: the job goes on without it
    // from now on, and the rank must acknowledge that first (the engine refuses it until then).
    if (const uint32_t before = membership_.number(); config_.on_loss != OnLoss::kFail && links_.transport != nullptr) {
      LoseNodes();
      if (membership_.number() != before)
        return Status(SYNCD_ERR_RANK_LOST, "tensor '" + r.name + "': " + membership_.why() +
                                               "; acknowledge the new membership, then call again");
    }
    return Status(why.code(), "tensor '" + r.name + "': cannot run, " + why.message());
  }
  if (!lost_.empty()) {
    if (std::string losses = BlockingLosses(); !losses.empty())
      return Status(SYNCD_ERR_RANK_LOST, "tensor '" + r.name + "': cannot run, " + losses);
    if (const auto it = lost_.find(r.local_rank); it != lost_.end() && it->second.continued)
      return Status(SYNCD_ERR_RANK_LOST, "tensor '" + r.name + "': rank " + std::to_string(r.rank) +
                                             " cannot take part: " + it->second.reason);
  }
  if (set_hooks_.ledger != nullptr) set_hooks_.ledger->Enter(r, RequestState::kWaiting, r.received_ns);  // in its set from now
  if (abi::IsPointToPoint(r.kind)) {
    p2p_.Add(std::move(r));
    CompleteTransfers();
    return Status::Ok();
  }
  return set->Add(std::move(r));
}

bool Job::Poll(uint64_t now_ns) {
  bool did = false;
  if (config_.on_loss != OnLoss::kFail && links_.transport != nullptr) {
    // A global set another node aborted for a lost node: nothing of it progresses the network any
    // more, and this node must see the loss for itself to go on.
    if (auto it = sets_.find(0); it != sets_.end() && !it->second->Refusal().ok()) links_.transport->Progress();
    LoseNodes();
  }
  // A node to take back stops a cycle's blocking: the set it blocks in is about to be made afresh.
  const bool may_block = !membership_.ReturnWaits(/*asking=*/false);
  for (auto& [id, set] : sets_) {
    did |= set->Poll(now_ns, may_block);
    set->TakeSetChanges(&set_changes_);
  }
  RouteNotices();
  if (p2p_.InFlight() > 0) {
    did |= p2p_.Poll();
    // The job failed (a lost rank or node, a stall): no transfer of it can complete.
    if (auto it = sets_.find(0); it != sets_.end())
      if (Status why = it->second->Refusal(); !why.ok()) p2p_.EndAll(why);
    CompleteTransfers();
  }
  if (!set_changes_.empty()) {
    ApplySetChanges();
    did = true;
  }
  if (!health_out_.empty() || !health_in_.empty()) did |= PollHealth();
  if (membership_.ReturnWaits(/*asking=*/true)) did |= ApplyNodeBack() | ApplyRestarts(now_ns);
  return did;
}

size_t Job::End(const EndScope& scope, const Status& why) {
  size_t waiting = 0;
  switch (scope.kind) {
    case EndScope::Kind::kRequest:  // the engine's: a request no set or transfer holds
      return 0;
    case EndScope::Kind::kClient:
      p2p_.EndRank(scope.local_rank, config_.node_rank * local_size_ + scope.local_rank, why);
      for (auto& [id, set] : sets_) waiting += set->End(why, ProcessSet::Reach::kRank, scope.peers_why);
      break;
    case EndScope::Kind::kProcessSet:
      p2p_.EndAll(why, scope.set);
      if (auto it = sets_.find(scope.set); it != sets_.end()) waiting = it->second->End(why, scope.reach, scope.peers_why);
      break;
    case EndScope::Kind::kJob:
      p2p_.EndAll(why);
      for (auto& [id, set] : sets_) waiting += set->End(why, scope.reach, scope.peers_why);
      break;
  }
  CompleteTransfers();
  RouteNotices();
  return waiting;
}

void Job::Leave(uint64_t deadline_ns, const std::string& why, const std::string& peer_reason) {
  for (auto& [id, set] : sets_) set->Leave(deadline_ns, why, peer_reason);
  RouteNotices();
}

void Job::RouteNotices() {
  const auto it = sets_.find(0);
  if (it == sets_.end()) return;
  it->second->TakeNotices(&notices_in_);
  for (ControlNotice& n : notices_in_) {
    // Notices come from the global set's nodes: by the job's node numbers once it was made afresh.
    const uint32_t node = membership_.JobNode(n.from);
    if (n.message.kind == ControlMessage::Kind::kHealth) ReceiveHealth(node, n.message);
    else if (!membership_.Receive(node, n.message)) notices_out_.push_back({node, std::move(n.message)});
  }
  notices_in_.clear();
}

void Job::Retire(std::vector<std::unique_ptr<ProcessSet>>* retired) {
  RouteNotices();
  for (auto& [id, set] : sets_)
    if (set->gpu_busy()) retired->push_back(std::move(set));
  sets_.clear();
  set_info_.clear();
  set_changes_.clear();
}

void Job::Mark(int32_t rank, const std::string& what) {
  Timeline* tl = set_hooks_.timeline;
  if (tl == nullptr || !tl->on()) return;
  TraceEvent e;
  e.t0 = e.t1 = abi::MonotonicNs();
  e.kind = TraceKind::kMark;
  e.rank = rank;
  e.name = tl->Name(what);
  tl->Record(e);
}

bool Job::Attached(uint32_t local_rank) {
  const auto it = lost_.find(local_rank);
  if (it == lost_.end()) return false;
  if (!it->second.continued) {
    lost_.erase(it);
    return false;
  }
  size_t continued = 0, vacant = 0;
  for (const auto& [lr, l] : lost_) {
    continued += l.continued;
    vacant += l.vacant;
  }
  if (continued == local_size_ || it->second.awaiting_node_back || membership_.wants_back()) {
    // The node stands in for every name: the job must take it back first (node_back.cc). A node
    // whose every slot was vacant from the start joins rather than comes back.
    membership_.WantBack(/*joins=*/vacant == local_size_);
    it->second.awaiting_node_back = true;
    const std::string node = std::to_string(config_.node_rank);
    it->second.reason = "rank " + std::to_string(config_.node_rank * local_size_ + local_rank) +
                        (membership_.back_joins() ? " is a new rank on node " + node +
                                           ", whose every slot was vacant: it takes part once the job has taken the "
                                           "node in"
                                     : " is a replacement on node " + node +
                                           ", whose every rank was lost: it takes part once the job has taken the "
                                           "node back") +
                        " (the membership then changes: acknowledge it and call again)";
    membership_.Record(it->second.reason);
    RequestNodeBack();
    return true;
  }
  const std::string rank = std::to_string(config_.node_rank * local_size_ + local_rank);
  const std::string why = it->second.vacant
                              ? "rank " + rank + " joined: a new rank attached in its vacant slot; it takes part from "
                                                 "its first collective"
                              : "rank " + rank + " is back: a replacement attached in its place; it takes part again "
                                                 "from its first collective";
  spdlog::info("{}", why);
  membership_.Record(why);
  Mark(int32_t(config_.node_rank * local_size_ + local_rank), why);
  lost_.erase(it);
  if (const auto set = sets_.find(0); set != sets_.end()) set->second->Replaced(local_rank);
  return true;
}

bool Job::RankLeft(uint32_t local_rank, uint32_t rank, int32_t pid, const std::string& who_why, bool clean,
                   size_t attached_left) {
  // Requests of this rank still in flight were abandoned: what needs them cannot complete.
  bool abandoned = false;
  for (const auto& [id, set] : sets_) abandoned = abandoned || set->Abandons(local_rank);
  abandoned = abandoned || p2p_.Holds(rank);
  LostRank& lost = lost_[local_rank] = LostRank{pid, who_why, true, ++loss_seq_};
  lost.clean = clean && !abandoned;
  // The timeline marks a rank lost while the job runs (not the normal end of a job).
  if (!clean || abandoned)
    Mark(int32_t(rank), "rank " + std::to_string(rank) + " lost: " + who_why +
                            (config_.on_loss != OnLoss::kFail ? "; the job goes on without it" : ""));
  lost.lost_unix_s = UnixSeconds();
  // Once every local rank has come and gone the job is over: the next job's ranks may attach in
  // any order, so departed ranks stop failing new requests (they stay listed as lost until their
  // slots are reused). A rank that left before a slower one even attached still blocks.
  const bool job_over = attached_left == 0 && lost_.size() == local_size_;
  if (job_over)
    for (auto& [lr, l] : lost_) l.blocking = false;
  // A clean detach between collectives (Horovod's shutdown() then init() again, on every rank):
  // requests that need this rank wait for it to attach again, for a grace period. Under --on-loss
  // continue or restore the last rank of the node waits too: if the other nodes' ranks go on past
  // it, the node's ranks left mid-job (ExpireDepartures).
  if (clean && !abandoned && (!job_over || config_.on_loss != OnLoss::kFail)) {
    lost.blocking = false;
    lost.rejoin_deadline_ns = abi::MonotonicNs() + kRejoinGraceNs;
    return false;
  }
  // --on-loss continue or restore: the job goes on without it, on every node.
  if (config_.on_loss != OnLoss::kFail && (!clean || abandoned)) {
    ContinueWithout(local_rank, rank, who_why);
    return job_over;
  }
  // Other nodes may have ranks waiting on this one: unless it left cleanly with nothing in
  // flight (the normal end of a job), the job cannot go on. This holds even when it was this
  // node's last rank: the other nodes' ranks still wait for it.
  const Status peers = !clean || abandoned ? Status(SYNCD_ERR_RANK_LOST, who_why) : Status::Ok();
  End(EndScope::Client(local_rank, peers), Status(SYNCD_ERR_RANK_LOST, who_why + " while the collective was in flight"));
  return job_over;
}

void Job::ExpireDepartures(uint64_t now_ns, bool any_attached) {
  // Once every local rank has come and gone the job is over here (RankLeft): its departures
  // expire without blocking anyone, so that its next run (a second step under the same job id)
  // may attach in any order, however long after. Unless other nodes' ranks still run on.
  const bool over = !any_attached && lost_.size() == local_size_ &&
                    (config_.on_loss == OnLoss::kFail || !PeersAttached(now_ns));
  if (over) {
    for (auto& [lr, lost] : lost_)
      if (lost.rejoin_deadline_ns != 0 && now_ns >= lost.rejoin_deadline_ns) lost.rejoin_deadline_ns = 0;
    return;
  }
  std::string expired;
  std::vector<uint32_t> expired_ranks;  // local
  for (auto& [lr, lost] : lost_) {
    if (lost.rejoin_deadline_ns == 0 || now_ns < lost.rejoin_deadline_ns) continue;
    expired_ranks.push_back(lr);
    lost.rejoin_deadline_ns = 0;
    lost.blocking = true;
    lost.reason += " and did not attach again within " + std::to_string(kRejoinGraceNs / 1'000'000'000) + " s";
    expired += (expired.empty() ? "" : "; ") + lost.reason;
  }
  if (expired.empty()) return;
  if (!any_attached) {
    // Every rank of this node has left. While other nodes' ranks are still attached (as their
    // health reports say), they left mid-job (an exception's exit says goodbye too): under
    // --on-loss continue or restore the job goes on without them, the node standing in for them.
    // Otherwise this is the job's end here.
    if (config_.on_loss == OnLoss::kFail || !PeersAttached(now_ns)) return;
    std::vector<uint32_t> gone;
    for (const auto& [lr, lost] : lost_)
      if (!lost.continued) gone.push_back(lr);
    for (uint32_t lr : gone) GoOnWithoutDeparted(lr);
    return;
  }
  if (config_.on_loss != OnLoss::kFail) {
    for (uint32_t lr : expired_ranks) GoOnWithoutDeparted(lr);
    return;
  }
  // They will not come: what waits for them fails, and when anything did, the job ends on every
  // node (other nodes' ranks wait for them too).
  const Status why(SYNCD_ERR_RANK_LOST, expired);
  bool waiting = false;
  for (const auto& [id, set] : sets_) waiting = waiting || set->InFlight() > 0;
  // Receives here from each of them fail (End does the first's, with every set's requests).
  for (size_t i = 1; i < expired_ranks.size(); ++i)
    p2p_.EndRank(expired_ranks[i], config_.node_rank * local_size_ + expired_ranks[i], why);
  End(EndScope::Client(expired_ranks.front(), waiting ? why : Status::Ok()), why);
}

void Job::GoOnWithoutDeparted(uint32_t local_rank) {
  LostRank& lost = lost_[local_rank];
  // A clean detach (hvd.shutdown, the interpreter's exit): the others may have finished their
  // collectives with it already; should they call more, the node stands in. Not a loss.
  lost.departed = true;
  ContinueWithout(local_rank, config_.node_rank * local_size_ + local_rank, lost.reason);
}

void Job::ContinueWithout(uint32_t local_rank, uint32_t rank, const std::string& why) {
  LostRank& lost = lost_[local_rank];
  lost.blocking = false;
  lost.rejoin_deadline_ns = 0;
  lost.continued = true;
  spdlog::log(lost.departed ? spdlog::level::info : spdlog::level::warn, "{}; the job goes on without it (--on-loss {})",
              why, config_.on_loss == OnLoss::kRestore ? "restore: what was in flight fails" : "continue");
  const Status gone(SYNCD_ERR_RANK_LOST, why);
  p2p_.EndRank(local_rank, rank, gone);
  for (auto& [id, set] : sets_)
    if (!set->ContinueWithout(local_rank))
      set->End(Status(SYNCD_ERR_RANK_LOST, "process set " + std::to_string(id) + ": " + why +
                                                " (a process set cannot go on without a rank)"),
               ProcessSet::Reach::kJob);
  CompleteTransfers();
}

std::string Job::BlockingLosses() const {
  std::vector<const LostRank*> losses;
  for (const auto& [lr, lost] : lost_)
    if (lost.blocking) losses.push_back(&lost);
  std::sort(losses.begin(), losses.end(), [](auto* a, auto* b) { return a->seq < b->seq; });
  std::string out;
  for (const LostRank* l : losses) out += (out.empty() ? "" : "; ") + l->reason;
  return out;
}

ProcessSet* Job::SetOf(int32_t id) {
  auto it = sets_.find(id);
  return it == sets_.end() ? nullptr : it->second.get();
}

const std::vector<uint32_t>* Job::SetRanksOf(int32_t id) const {
  auto it = set_info_.find(id);
  return it == set_info_.end() ? nullptr : &it->second.ranks;
}

bool Job::TellNodes(ControlMessage m, int32_t node) {
  if (node >= 0 && (node = membership_.SetNode(uint32_t(node))) < 0) return false;  // not in the global set
  const auto it = sets_.find(0);
  return it != sets_.end() && it->second->TellNodes(std::move(m), node);
}

void Job::CompleteTransfers() {
  for (PointToPoint::Ended& e : p2p_.TakeEnded()) set_hooks_.outcomes->Add(std::move(e.request), std::move(e.status));
}

void Job::ApplySetChanges() {
  std::vector<ReadyTensor> changes = std::exchange(set_changes_, {});
  for (ReadyTensor& t : changes) {
    const Request& f = t.first();
    const Status result = f.kind == abi::OpKind::kAddProcessSet ? AddSet(f.splits) : RemoveSet(f.removed_set);
    set_hooks_.outcomes->Add(t.requests, result);
  }
}

uint32_t Job::FreeSlot(int32_t except_set) {
  auto used = [this, except_set](uint32_t s) {
    for (const auto& [sid, info] : set_info_)
      if (info.slot == s && sid != except_set) return true;
    return false;
  };
  for (uint32_t tries = 0; tries < uint32_t(abi::kMaxProcessSets); ++tries) {
    last_slot_ = last_slot_ % uint32_t(abi::kMaxProcessSets) + 1;
    if (!used(last_slot_)) return last_slot_;
  }
  return 0;
}

ProcessSetPlace Job::PlaceOf(int32_t id, const std::vector<int64_t>& ranks, std::vector<uint32_t>* nodes) const {
  ProcessSetPlace place;
  place.id = id;
  place.job = id_;
  for (int64_t r : ranks) {
    const uint32_t node = uint32_t(r) / local_size_;
    if (nodes->empty() || nodes->back() != node) {
      nodes->push_back(node);
      place.offsets.push_back(uint32_t(place.ranks.size()));
    }
    place.ranks.push_back(uint32_t(r));
    if (node == config_.node_rank) place.local_ranks.push_back(uint32_t(r) % local_size_);
  }
  place.offsets.push_back(uint32_t(place.ranks.size()));
  if (!place.local_ranks.empty())
    place.node_rank = uint32_t(std::find(nodes->begin(), nodes->end(), config_.node_rank) - nodes->begin());
  return place;
}

Status Job::AddSet(const std::vector<int64_t>& ranks) {
  if (set_info_.size() >= size_t(abi::kMaxProcessSets))
    return InvalidArgument("at most " + std::to_string(abi::kMaxProcessSets) +
                           " process sets (the global one included) may exist at once; remove one first");
  const int32_t id = ++last_set_id_;
  const uint32_t slot = FreeSlot();
  std::vector<uint32_t> nodes;  // the set's nodes, in order
  ProcessSetPlace place = PlaceOf(id, ranks, &nodes);
  SetInfo info{place.ranks, slot, nullptr};
  if (!place.local_ranks.empty()) {
    if (nodes.size() > 1) info.comm = std::make_unique<SetTransport>(links_.transport, nodes, slot);
    place.comm = info.comm.get();
    spdlog::info("process set {}: {} ranks on {} nodes, {} here", id, place.ranks.size(), nodes.size(),
                 place.local_ranks.size());
    set_info_[id] = std::move(info);
    sets_[id] = std::make_unique<ProcessSet>(config_, std::move(place), links_.counters, set_hooks_);
  } else {
    set_info_[id] = std::move(info);
  }
  return Status(SYNCD_OK, "process set " + std::to_string(id));
}

Status Job::RemoveSet(int32_t id) {
  if (id == 0) return InvalidArgument("the global process set cannot be removed");
  auto info = set_info_.find(id);
  if (info == set_info_.end()) return InvalidArgument("process set " + std::to_string(id) + " is not one of this job's");
  if (auto it = sets_.find(id); it != sets_.end()) {
    // Every node removes it at this point of the global set's order: what it still holds fails.
    End(EndScope::Set(id, ProcessSet::Reach::kRemoved),
        InvalidArgument("process set " + std::to_string(id) + " was removed while it ran"));
    sets_.erase(it);
  }
  set_info_.erase(info);
  return Status(SYNCD_OK, "process set " + std::to_string(id));
}

size_t Job::SlicedInFlight() const {
  size_t n = 0;
  for (const auto& [id, set] : sets_) n += set->SlicedInFlight();
  return n;
}

size_t Job::InFlight() const {
  size_t n = 0;
  for (const auto& [id, set] : sets_) n += set->InFlight();
  return n + p2p_.InFlight();
}

bool Job::Drained(bool idle_here) {
  bool drained = idle_here;
  for (auto& [id, set] : sets_) drained = set->Drained(idle_here) && drained;  // every set hears of the drain
  return drained;
}

uint64_t Job::NextPollNs(uint64_t now_ns, bool* data_waits) const {
  uint64_t next_ns = UINT64_MAX;
  for (const auto& [id, set] : sets_) {
    const uint64_t next = set->NextPollNs(now_ns);
    next_ns = std::min(next_ns, next);
    if (next <= now_ns && !set->WaitsOnlyOnCycle()) *data_waits = true;
  }
  return next_ns;
}

void Job::SnapshotSets(uint64_t now_ns, const RequestLedger& ledger, uint64_t stall_ns,
                       std::vector<ProcessSetSnapshot>* sets, std::vector<StallSnapshot>* stalls) const {
  for (const auto& [id, set] : sets_) {
    sets->push_back(set->Snapshot(now_ns));
    ProcessSetSnapshot& snap = sets->back();
    snap.job_id = id_;
    const RequestStates in = ledger.InSet(id_, id);
    for (size_t i = 0; i < kRequestStates; ++i)
      snap.requests.push_back({RequestStateName(RequestState(i)), in.count[i],
                               in.count[i] == 0 ? 0.0 : double(now_ns - std::min(now_ns, in.oldest_since_ns[i])) / 1e9});
    for (StallSnapshot& st : p2p_.Waits(now_ns, stall_ns, id)) snap.stalls.push_back(std::move(st));
    for (StallSnapshot& st : snap.stalls) {
      st.job_id = id_;
      stalls->push_back(st);
    }
  }
}

}  // namespace syncd
