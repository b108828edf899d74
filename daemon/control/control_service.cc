#include "daemon/control/control_service.h"

#include <grp.h>
#include <pwd.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include <algorithm>
#include <thread>

#include "daemon/base/version.h"
#include "proto/status_names.h"

namespace syncd {

namespace {

// The parts of a status reply, one per section of `syncctl status`.
void FillStall(const StallSnapshot& st, control::Stall* out) {
  out->set_name(st.name);
  out->set_waiting_s(st.waiting_s);
  for (uint32_t m : st.missing_ranks) out->add_missing_ranks(m);
  for (uint32_t m : st.submitted_ranks) out->add_submitted_ranks(m);
  out->set_transfer(st.transfer);
  out->set_tag(st.tag);
}

// Jobs served side by side (the status names none): one job's ranks, process sets and stalls,
// the status naming it; the status as it is when the job is not served here.
std::shared_ptr<const StatusSnapshot> OneJobsView(const std::shared_ptr<const StatusSnapshot>& all, uint64_t job) {
  const auto usage = std::find_if(all->jobs.begin(), all->jobs.end(), [job](const JobUsage& u) { return u.job_id == job; });
  if (usage == all->jobs.end()) return all;
  auto s = std::make_shared<StatusSnapshot>(*all);
  s->job_id = job;
  s->node_rank = usage->node_rank;
  s->node_count = usage->nodes;
  s->local_size = usage->local_size;
  const auto others = [job](const auto& x) { return x.job_id != job; };
  std::erase_if(s->clients, others);
  std::erase_if(s->process_sets, others);
  std::erase_if(s->stalls, others);
  if (const auto it = all->own_link_job_nodes.find(job); it != all->own_link_job_nodes.end()) s->job_nodes = it->second;
  if (const auto it = all->job_figures.find(job); it != all->job_figures.end()) {
    s->collectives = it->second.collectives;
    s->stragglers = it->second.stragglers;
    s->straggler_window = it->second.straggler_window;
    s->straggler_collectives = it->second.straggler_collectives;
  }
  s->job_figures.clear();
  if (const auto it = all->job_timelines.find(job); it != all->job_timelines.end()) s->timeline = it->second;
  return s;
}

void FillClients(const StatusSnapshot& s, control::StatusReply* r) {
  for (const ClientSnapshot& c : s.clients) {
    control::ClientStatus* out = r->add_clients();
    out->set_rank(c.rank);
    out->set_local_rank(c.local_rank);
    out->set_pid(c.pid);
    out->set_state(c.state);
    out->set_ops(c.ops);
    out->set_bytes(c.bytes);
    out->set_errors(c.errors);
    out->set_submit_depth(c.submit_depth);
    out->set_completion_depth(c.completion_depth);
    out->set_last_seen_s(c.last_seen_s);
    out->set_process(c.process);
    out->set_unresponsive(c.unresponsive);
    out->set_lost_why(c.lost_why);
    out->set_lost_unix_s(c.lost_unix_s);
    out->set_job_went_on(c.job_went_on);
    out->set_rejoin_grace_left_s(c.rejoin_grace_left_s);
    out->set_job(c.job_id);
  }
}

void FillJobs(const JobRegistry& jobs, const StatusSnapshot& s, control::StatusReply* r) {
  for (const JobAdmission& j : jobs.List()) {
    control::RegisteredJob* out = r->add_jobs();
    out->set_job(j.job);
    out->set_uid(j.uid);
    out->set_gid(j.gid ? int64_t(*j.gid) : -1);
    out->set_weight(j.weight);
    out->set_added_unix_s(j.added_unix_s);
    out->set_nodes(j.nodes);
    out->set_node_rank(j.node_rank);
    out->set_local_size(j.local_size);
    out->set_rendezvous(j.rendezvous);
    if (j.nodes > 1) out->set_links(j.linked ? "connected" : "linking");
    out->mutable_settings()->insert(j.settings.begin(), j.settings.end());
    passwd pw{};
    passwd* found = nullptr;
    char buf[1024];
    if (getpwuid_r(j.uid, &pw, buf, sizeof(buf), &found) == 0 && found != nullptr) out->set_user(found->pw_name);
    const auto served = std::find_if(s.jobs.begin(), s.jobs.end(), [&](const JobUsage& u) { return u.job_id == j.job; });
    out->set_running(served != s.jobs.end());
    if (served == s.jobs.end()) continue;
    out->set_ranks_attached(served->ranks);
    out->set_requests(served->requests);
    out->set_bytes(served->bytes);
    out->set_errors(served->errors);
    out->set_engine_s(served->engine_s);
    out->set_waited_s(served->waited_s);
    out->set_link_bytes(served->link_bytes);
    out->set_link_turns_waited(served->link_turns_waited);
  }
}

void FillThroughput(const StatusSnapshot& s, uint64_t fusion_threshold, control::StatusReply* r) {
  control::OpCounters* ops = r->mutable_ops();
  for (const auto& [name, count] : s.by_kind) {
    control::KindCount* k = ops->add_kinds();
    k->set_kind(name);
    k->set_ops(count.ops);
    k->set_bytes(count.bytes);
    if (name == "allreduce") r->set_bytes_reduced(count.bytes);
  }
  ops->set_errors(s.error_ops);
  r->set_fused_ops(s.fused_ops);
  r->set_mean_tensors_per_fusion(s.fused_ops ? double(s.fused_tensors) / double(s.fused_ops) : 0.0);
  r->set_fusion_threshold_bytes(fusion_threshold);
  r->set_engine_busy_pct(s.uptime_s > 0 ? 100.0 * double(s.engine_busy_ns) / 1e9 / s.uptime_s : 0.0);
  r->set_engine_wakeups(s.engine_wakeups);
  r->set_engine_work_turns(s.engine_work_turns);
  r->set_collectives_completed(s.collectives_completed);
  r->set_client_wakes(s.client_wakes);
  r->set_engine_messages(s.engine_messages);
  r->set_engine_wait(s.engine_wait);
  r->set_engine_core_wait_pct(s.engine_core_wait_pct);
  r->set_engine_core_sharers(s.engine_core_sharers);
  r->set_open_requests(s.open_requests);
  r->set_requests_finished_twice(s.requests_finished_twice);
  r->set_engine_cpu_s(s.engine_cpu_s);
  r->set_daemon_cpu_s(s.daemon_cpu_s);
  for (const StallSnapshot& st : s.stalls) FillStall(st, r->add_stalls());
}

void FillTopo(const ProcessSetSnapshot& s, control::Topo* t) {
  char hex[32];
  snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)s.plan_hash);
  t->set_plan_hash(hex);
  t->set_plan_tensors(s.plan_tensors);
  t->set_plan_groups(s.plan_groups);
  t->set_plan_gpu_tensors(s.plan_gpu_tensors);
  t->set_in_use(s.plan_in_use);
  t->set_steps(s.topo.steps);
  t->set_groups_executed(s.topo.groups_executed);
  t->set_tensors_executed(s.topo.tensors_executed);
  t->set_fallback_tensors(s.fallback_tensors);
  t->set_next_group(s.topo_next_group);
  t->set_topo_execution_ms_total(double(s.topo.execution_ns_total) / 1e6);
}

void FillGpu(const StatusSnapshot& s, bool ipc_cache, control::Gpu* g) {
  for (const std::string& d : s.gpu.names) g->add_devices(d);
  g->set_nccl_ranks(s.gpu.nccl_ranks);
  g->set_allreduces(s.gpu.allreduces);
  g->set_broadcasts(s.gpu.broadcasts);
  g->set_bytes(s.gpu.bytes);
  g->set_ipc_handle_hits(s.gpu.handle_hits);
  g->set_ipc_handle_opens(s.gpu.handle_opens);
  g->set_ipc_handle_closes(s.gpu.handle_closes);
  g->set_ipc_handles_open(s.gpu.open_handles);
  g->set_ipc_cache(ipc_cache);
  g->set_completed(s.gpu.completed);
  g->set_flag_waits(s.gpu.flag_waits);
  g->set_event_waits(s.gpu.event_waits);
  g->set_aborts(s.gpu.aborts);
  g->set_rebuilds(s.gpu.rebuilds);
  g->set_flags_released(s.gpu.flags_released);
  g->set_failure(s.gpu.failure);
  const uint64_t requests = s.gpu.handle_hits + s.gpu.handle_opens;
  g->set_map_us_mean(requests ? double(s.gpu.map_ns) / 1e3 / double(requests) : 0.0);
  const uint64_t issued = s.gpu.allreduces + s.gpu.broadcasts;
  g->set_issue_us_mean(issued ? double(s.gpu.issue_ns) / 1e3 / double(issued) : 0.0);
  g->set_device_us_mean(s.gpu.completed ? double(s.gpu.device_ns) / 1e3 / double(s.gpu.completed) : 0.0);
}

void FillCoordination(const ProcessSetSnapshot& s, const std::string& mode, control::Coordination* c) {
  const NegotiationStats& n = s.negotiation;
  c->set_mode(mode);
  c->set_cycles(n.cycles);
  c->set_mean_cycle_ms(n.cycles ? double(n.cycle_ns_total) / double(n.cycles) / 1e6 : 0.0);
  c->set_coordination_ms_total(double(n.coordination_ns_total) / 1e6);
  c->set_cache_hits(n.cache_hits);
  c->set_cache_misses(n.cache_misses);
  const uint64_t names = n.cache_hits + n.cache_misses;
  c->set_cache_hit_rate(names ? double(n.cache_hits) / double(names) : 0.0);
  c->set_coordinator_rounds(n.coordinator_rounds);
  c->set_pending_names(s.pending_names);
  c->set_execution_ms_total(double(n.execution_ns_total) / 1e6);
  c->set_blocked_ms_total(double(n.blocked_ns_total) / 1e6);
  c->set_idle_ms_total(double(n.idle_ns_total) / 1e6);
  c->set_sleep_agreements(n.sleep_agreements);
  c->set_agreed_sleep_ms_total(double(n.agreed_sleep_ns_total) / 1e6);
  c->set_coordination_messages(n.coordination_messages);
  c->set_coordination_bytes(n.coordination_bytes);
  c->set_cycle_requests(n.cycle_requests);
  c->set_overlapped_cycles(n.overlapped_cycles);
  c->set_failure(s.failure);
}

void FillPeers(const StatusSnapshot& s, control::Coordination* c) {
  for (const auto& [node, state] : s.peers) {
    control::PeerStatus* p = c->add_peers();
    p->set_node(node);
    p->set_state(state);
  }
}

void FillProcessSet(const ProcessSetSnapshot& p, const std::string& mode, control::ProcessSetStatus* out) {
  out->set_id(p.id);
  out->set_job(p.job_id);
  out->set_size(p.size);
  for (uint32_t r : p.ranks) out->add_ranks(r);
  out->set_nodes(p.nodes);
  out->set_pending_tensors(p.pending_tensors);
  for (const ProcessSetSnapshot::RequestsIn& in : p.requests) {
    control::RequestsIn* r = out->add_requests();
    r->set_state(in.state);
    r->set_count(in.count);
    r->set_oldest_s(in.oldest_s);
  }
  if (p.coordinated) FillCoordination(p, mode, out->mutable_coordination());
  if (p.has_plan) FillTopo(p, out->mutable_topo());
  for (const StallSnapshot& st : p.stalls) FillStall(st, out->add_stalls());
  for (const PartialOpSnapshot& op : p.partial_ops) {
    control::PartialOp* o = out->add_partial_ops();
    o->set_name(op.name);
    o->set_mode(op.mode);
    o->set_quorum(op.quorum);
    o->set_rounds(op.rounds);
    o->set_mean_nap(op.mean_nap);
    o->set_late(op.late);
    o->set_waiting(op.waiting);
    for (const auto& [rank, rounds] : op.most_absent) {
      control::PartialOp::Absent* a = o->add_most_absent();
      a->set_rank(rank);
      a->set_rounds(rounds);
    }
  }
}

void FillTimeline(const StatusSnapshot& s, control::TimelineStatus* t) {
  const TimelineState& tl = s.timeline;
  t->set_on(tl.on);
  t->set_file(tl.path);
  t->set_events(tl.events);
  t->set_dropped(tl.dropped);
  t->set_written(tl.written);
  t->set_bytes(tl.bytes);
  t->set_cut(tl.cut);
  for (const auto& [offset, error] : tl.clocks) {
    t->add_clock_offset_us(offset);
    t->add_clock_error_us(error);
  }
}

void FillJob(const StatusSnapshot& s, control::StatusReply* r) {
  for (const NodeHealth& n : s.job_nodes) {
    control::JobNode* o = r->add_job();
    o->set_node(n.node);
    o->set_host(n.host);
    o->set_daemon_pid(n.daemon_pid);
    o->set_state(n.state);
    o->set_report_age_s(n.report_age_s);
    o->set_why(n.why);
    o->set_pending_tensors(n.pending);
    o->set_collectives(n.collectives);
    o->set_wait_p50_ms(n.wait_p50_ms);
    o->set_wait_p95_ms(n.wait_p95_ms);
    o->set_late_ms(n.late_ms);
    for (const RankHealth& k : n.ranks) {
      control::JobRank* x = o->add_ranks();
      x->set_rank(k.rank);
      x->set_pid(k.pid);
      x->set_state(k.attached ? "attached" : k.left ? "left" : "lost");
      x->set_last_seen_s(k.last_seen_s);
      x->set_process(k.process);
      x->set_unresponsive(k.why);
      x->set_collectives(k.collectives);
      x->set_last(k.last);
      x->set_mean_late_ms(k.mean_late_ms);
      x->set_p95_late_ms(k.p95_late_ms);
      x->set_wait_share(k.wait_share);
      x->set_job_late_ms(k.job_late_ms);
    }
  }
}

}  // namespace

grpc::Status ControlService::Status(grpc::ServerContext*, const control::StatusRequest* request,
                                    control::StatusReply* r) {
  std::shared_ptr<const StatusSnapshot> s = engine_->FreshSnapshot(100);
  if (request->job() != 0 && s->job_id == 0) s = OneJobsView(s, request->job());
  r->set_version(kVersionString);
  r->set_uptime_s(s->uptime_s);
  r->set_node_rank(s->node_rank);
  r->set_node_count(s->node_count);
  r->set_run_dir(config_.run_dir);
  r->set_draining(engine_->draining());
  r->set_node_service(jobs_ != nullptr);
  r->set_job_id(s->job_id);
  if (jobs_ != nullptr) FillJobs(*jobs_, *s, r);
  r->set_metrics_url(metrics_url_);
  r->set_straggler_window(s->straggler_window);
  r->set_straggler_collectives(s->straggler_collectives);
  r->set_completion_events_dropped(s->dropped_completion_events);
  r->set_health_messages_sent(s->health_messages);
  r->set_health_bytes_sent(s->health_bytes);
  for (const StatusSnapshot::MembershipChange& m : s->membership_changes) {
    control::MembershipChange* out = r->add_membership_changes();
    out->set_membership(m.membership);
    out->set_unix_s(m.unix_s);
    out->set_why(m.why);
  }
  for (const StragglerRank& g : s->stragglers) {
    control::Straggler* o = r->add_stragglers();
    o->set_rank(g.rank);
    o->set_collectives(g.collectives);
    o->set_last(g.last);
    o->set_mean_late_ms(g.mean_late_ms);
    o->set_p95_late_ms(g.p95_late_ms);
    o->set_wait_share(g.wait_share);
  }
  FillJob(*s, r);
  FillTimeline(*s, r->mutable_timeline());
  for (uint32_t c : cores_.daemon) r->add_pinned_cores(c);
  for (uint32_t c : cores_.workers) r->add_worker_cores(c);
  r->set_local_size(s->local_size);
  FillClients(*s, r);
  FillThroughput(*s, config_.fusion_threshold, r);
  r->set_on_loss(s->on_loss);
  r->set_compression(abi::CompressionName(config_.compression));
  r->set_compression_min_bytes(config_.compression_min_bytes);
  for (uint32_t c = SYNCD_COMPRESSION_FP16; c < SYNCD_COMPRESSION_COUNT; ++c) {
    const StatusSnapshot::Compressed& n = s->compressed[c];
    if (n.tensors == 0) continue;
    control::CompressedBytes* o = r->add_compressed();
    o->set_compression(abi::CompressionName(c));
    o->set_tensors(n.tensors);
    o->set_tensor_bytes(n.tensor_bytes);
    o->set_wire_bytes(n.wire_bytes);
  }
  const ResidualStats& rs = s->residuals;
  control::Residuals* residuals = r->mutable_residuals();
  residuals->set_tensors(rs.tensors);
  residuals->set_bytes(rs.bytes);
  residuals->set_capacity_bytes(rs.capacity);
  residuals->set_evicted(rs.evicted);
  residuals->set_refused(rs.refused);
  residuals->set_cleared(rs.cleared);
  if (s->has_gpu) FillGpu(*s, config_.gpu_ipc_cache, r->mutable_gpu());
  for (const ProcessSetSnapshot& p : s->process_sets) FillProcessSet(p, s->coord_mode, r->add_process_sets());
  // The global set's sections, where they were before there were sets.
  const ProcessSetSnapshot* global = s->process_sets.empty() ? nullptr : &s->process_sets.front();
  if (global) r->set_pending_tensors(global->pending_tensors);
  if (global && global->has_plan) FillTopo(*global, r->mutable_topo());
  if (s->coordinated) {
    FillCoordination(global ? *global : ProcessSetSnapshot{}, s->coord_mode, r->mutable_coordination());
    FillPeers(*s, r->mutable_coordination());
  }
  return grpc::Status::OK;
}

grpc::Status ControlService::Timeline(grpc::ServerContext*, const control::TimelineRequest* request,
                                      control::TimelineReply*) {
  TimelineCommand c;
  c.job = request->job();
  c.start = !request->stop();
  c.path = request->file();
  c.seconds = request->seconds();
  c.cycles = request->cycles();
  const syncd::Status st = engine_->CommandTimeline(c, 5000);
  if (st.ok()) return grpc::Status::OK;
  return grpc::Status(st.code() == SYNCD_ERR_INVALID ? grpc::StatusCode::INVALID_ARGUMENT : grpc::StatusCode::UNAVAILABLE,
                      st.message());
}


grpc::Status ControlService::Drain(grpc::ServerContext* ctx, const control::DrainRequest* request,
                                   control::DrainReply* reply) {
  const double timeout_s = DrainTimeoutS(*request, double(config_.drain_timeout_s));
  const uint64_t t0 = abi::MonotonicNs();
  begin_drain_(timeout_s, "syncctl drain");
  // The engine stops once nothing is in flight, or at the deadline; the daemon exits after this reply.
  while (!engine_->finished()) {
    if (ctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "the caller went away; the drain goes on");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const Engine::DrainResult result = engine_->drain_result();
  reply->set_completed(result.completed);
  reply->set_failed(result.failed);
  reply->set_deadline_passed(result.deadline_passed);
  reply->set_seconds(double(abi::MonotonicNs() - t0) / 1e9);
  return grpc::Status::OK;
}

namespace {
constexpr double kMaxDrainS = 86400;
}  // namespace

double DrainTimeoutS(const control::DrainRequest& request, double default_s) {
  const double t = request.timeout_s();
  if (!(t >= 0)) return default_s;  // negative, or NaN
  return std::min(t, kMaxDrainS);
}

uint64_t DrainDeadlineNs(uint64_t now_ns, double timeout_s) {
  const double t = timeout_s > 0 ? std::min(timeout_s, kMaxDrainS) : 0;
  return now_ns + uint64_t(t * 1e9);
}

StatusOr<std::unique_ptr<grpc::Server>> StartControlServer(const std::string& run_dir, ControlService* service,
                                                           const std::string& admin_group) {
  const std::string path = run_dir + "/control.sock";
  unlink(path.c_str());
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + path, grpc::InsecureServerCredentials());
  builder.RegisterService(service);
  // Few, short RPCs: keep gRPC's thread pool small on the daemon's dedicated cores.
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, 1);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, 2);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server) return Status(SYNCD_ERR_SYSTEM, "gRPC control server could not listen on " + path);
  if (admin_group.empty()) {
    chmod(path.c_str(), 0600);
    return server;
  }
  const group* g = getgrnam(admin_group.c_str());
  if (g == nullptr || chown(path.c_str(), geteuid(), g->gr_gid) != 0 || chmod(path.c_str(), 0660) != 0) {
    server->Shutdown();
    return Status(SYNCD_ERR_INVALID, "--admin-group " + admin_group + ": " +
                                         (g == nullptr ? "no such group" : "cannot give it " + path + ": " + strerror(errno)));
  }
  return server;
}

}  // namespace syncd
