// The control plane's commands on the engine thread (commands.h): the facts for the status, a
// health report to send, the timeline, and a daemon restarted under its job (node 0 takes its node
// back: TakeNodeBack; the new daemon starts the job where node 0 has it: ResumeJob), and a node
// whose every rank is vacant starting its job (StartVacantJob), a node service's job removed
// (RemoveJob), and a registered job's settings and, of several nodes, its links (AdoptJobCommand).
#include <spdlog/spdlog.h>

#include "daemon/engine/engine.h"
#include "daemon/engine/engine_timing.h"

namespace syncd {

void Engine::RunCommands() {
  for (CommandQueue::Entry& e : commands_.TakeAll()) {
    if (std::holds_alternative<FactsCommand>(e.command)) {
      e.reply.set_value(CaptureFacts());
    } else if (auto* h = std::get_if<SendHealthCommand>(&e.command)) {
      // A report of a job that ended meanwhile is dropped (the next one is of the new job).
      Tenant* t = side_by_side_ ? TenantOfJob(h->job) : Only();
      if (t != nullptr && t->job->id() == h->job && (links_.daemons() || links_.Of(h->job))) t->job->SendHealth(h->mine);
      e.reply.set_value(Status::Ok());
    } else if (auto* l = std::get_if<AdoptJobCommand>(&e.command)) {
      if (l->transport) {
        links_.Adopt(l->job, OwnLinks{std::move(l->transport), l->nodes, l->node_rank});
        spdlog::info("job {}: links to its {} nodes taken over (this node is its node {})", l->job, l->nodes, l->node_rank);
      }
      // From the job's next start here (a registration that changes them is refused while it stands).
      if (l->settings.empty()) job_settings_.erase(l->job);
      else job_settings_[l->job] = std::move(l->settings);
      job_owner_[l->job] = l->owner;
      e.reply.set_value(Status::Ok());
    } else if (auto* r = std::get_if<RejoinCommand>(&e.command)) {
      e.reply.set_value(TakeNodeBack(*r));
    } else if (auto* j = std::get_if<ResumeJobCommand>(&e.command)) {
      e.reply.set_value(ResumeJob(j->where));
    } else if (auto* v = std::get_if<StartVacantJobCommand>(&e.command)) {
      e.reply.set_value(StartVacantJob(v->job));
    } else if (auto* j = std::get_if<RemoveJobCommand>(&e.command)) {
      e.reply.set_value(RemoveJob(j->job, j->why));
    } else if (auto* d = std::get_if<DrainJobCommand>(&e.command)) {
      e.reply.set_value(DrainJob(*d));
    } else {
      const TimelineCommand& c = std::get<TimelineCommand>(e.command);
      e.reply.set_value(RunTimelineCommand(c));
    }
  }
  if (!outcomes_.empty()) Settle();  // what a node's return or a resumed job ended
}

Status Engine::RunTimelineCommand(const TimelineCommand& c) {
  Tenant* t = nullptr;
  if (c.job != 0) {
    const auto it = tenants_.find(c.job);
    if (it == tenants_.end())
      return Status(SYNCD_ERR_INVALID, "timeline: job " + std::to_string(c.job) + " has no rank on this daemon now");
    t = it->second.get();
  } else if (tenants_.size() > 1) {
    std::string ids;
    for (const auto& [id, x] : tenants_) ids += (ids.empty() ? "" : ", ") + std::to_string(id);
    return Status(SYNCD_ERR_INVALID, "timeline: this daemon runs jobs " + ids + ": name one (syncctl timeline --job ID)");
  } else {
    t = Only();
  }
  if (t == nullptr) return Status(SYNCD_ERR_INVALID, "timeline: no job is running on this daemon yet");
  return c.start ? t->timeline->Start(c.path, c.seconds, c.cycles) : t->timeline->Stop();
}

RejoinAnswer Engine::TakeNodeBack(const RejoinCommand& c) {
  RejoinAnswer a;
  const std::string who = "node " + std::to_string(c.node) + "'s daemon";
  // The daemon's own job's links, or a node service's job's own.
  const OwnLinks* own = c.job != 0 ? links_.Of(c.job) : nullptr;
  Transport* transport = c.job != 0 ? (own ? own->transport.get() : nullptr) : links_.daemons();
  const uint32_t nodes = own ? own->nodes : config_.nodes, node_rank = own ? own->node_rank : config_.node_rank;
  if (!transport || c.node >= nodes || c.node == node_rank) {
    a.status = InvalidArgument(who + " cannot join again: not a peer of this node");
    return a;
  }
  if (!transport->PeerLost(c.node)) {
    a.status = Status(SYNCD_IN_PROGRESS, who + " is not known lost here (yet)");
    return a;
  }
  // The job goes on without the node (continue, restore): the new daemon joins it. Otherwise the
  // job ended with the loss and the new daemon serves the next one.
  // A daemon's own many-node job is its only one; a node service's runs beside others.
  Tenant* t = c.job != 0 ? TenantOfJob(c.job) : Only();
  const bool goes_on = t != nullptr && t->config.on_loss != OnLoss::kFail;
  if (nodes > 2 && !(goes_on && t->job->GlobalSetRuns())) {
    a.status = Status(SYNCD_ERR_INVALID, who + " was restarted when no job went on (--on-loss fail, or its job "
                                             "ended): in a job of more than 2 nodes the other nodes learn its new "
                                             "address only from a job that goes on; restart every daemon of the job");
    return a;
  }
  const uint32_t slot = goes_on ? t->job->NextGlobalSlot() : 0;
  if (Status st = transport->Reconnect(c.node, c.address, c.same_host_pid, slot); !st.ok()) {
    a.status = st;
    return a;
  }
  a.status = Status::Ok();
  if (!goes_on) {
    spdlog::info("{} was restarted and is reached again; it serves the next job", who);
    // A node service's job keeps its id from run to run: its next run here starts afresh, as the
    // new daemon's does (a daemon's own job's next run is another job).
    if (t != nullptr && c.job != 0) {
      if (t->client_by_local_rank.empty()) DropTenant(*t);
      else t->fresh_next_run = true;
    }
    return a;
  }
  a.job = t->job->id();
  a.local_size = t->local_size;
  Membership::RestartedNode n;
  n.node = c.node;
  n.number = t->job->membership().number() + 1;
  n.slot = slot;
  n.address = c.address;
  n.host = c.host;
  n.pid = c.pid;
  n.tell_others = true;
  a.resume = t->job->TakeRestartedNodeBack(n);
  PublishMembership(*t);
  return a;
}

Status Engine::ResumeJob(const RejoinAnswer& where) {
  if (side_by_side_ ? TenantOfJob(where.job) != nullptr : !tenants_.empty())
    return Status(SYNCD_ERR_INVALID, "a job already runs on this daemon");
  const uint32_t fixed = side_by_side_ ? 0 : local_size_;
  const uint32_t local_size = fixed == 0 && where.local_size != 0 ? where.local_size : fixed;
  PublishMembership(BeginJob(where.job, local_size, &where.resume));
  spdlog::info("restarted under job {:#x}: membership {}, its ranks stood in for until ranks attach in their place",
               where.job, where.resume.membership);
  return Status::Ok();
}

Status Engine::StartVacantJob(uint64_t job) {
  if (!tenants_.empty()) return Status(SYNCD_ERR_INVALID, "a job already runs on this daemon");
  BeginJob(job, local_size_);
  spdlog::info("job {:#x} starts with every rank of this node vacant: the node joins its collectives once a rank "
               "attaches here",
               job);
  return Status::Ok();
}

Status Engine::DrainJob(const DrainJobCommand& c) {
  if (Tenant* t = TenantOfJob(c.job); t != nullptr && !c.force) {
    // In flight: in its sets and transfers, or still on a ring (read on a later pass).
    bool busy = t->job->InFlight() > 0;
    for (const auto& [lr, id] : t->client_by_local_rank) {
      ClientState& client = clients_.at(id);
      busy = busy || client.held || client.info->segment.HasSubmission();
    }
    if (busy) return Status(SYNCD_IN_PROGRESS, "");
  }
  return RemoveJob(c.job, c.why);
}

Status Engine::RemoveJob(uint64_t job, const std::string& why) {
  Tenant* t = TenantOfJob(job);
  if (t == nullptr) {
    links_.Forget(job);
    job_settings_.erase(job);
    job_owner_.erase(job);
    return Status(SYNCD_OK, "0 ranks attached");
  }
  // Its ranks are told (each request in flight fails naming why), then disconnected: the
  // registration that let them attach is gone. Any other job served goes on untouched.
  End(*t, EndScope::Job(ProcessSet::Reach::kJob), Status(SYNCD_ERR_REFUSED, why));
  std::vector<uint32_t> ranks;
  for (const auto& [lr, id] : t->client_by_local_rank) ranks.push_back(id);
  for (uint32_t id : ranks) {
    clients_.at(id).info->segment.LetGo();
    Disconnect(id, "was disconnected: " + why);
    kick_client_(id);
  }
  // The job is over here: the other nodes are told, and its tenant goes (its residuals, its sets).
  t->job->Leave(abi::MonotonicNs() + engine_timing::kLeaveNoticeNs, "the job was removed", why);
  Settle();
  DropTenant(*t);
  links_.Forget(job);  // its links and settings go with it (a job that never ran here keeps none either)
  job_settings_.erase(job);
  job_owner_.erase(job);
  spdlog::warn("{}: {} of its ranks attached here were disconnected", why, ranks.size());
  return Status(SYNCD_OK, std::to_string(ranks.size()) + " ranks attached");
}

}  // namespace syncd
