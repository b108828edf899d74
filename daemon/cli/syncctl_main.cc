// syncctl: inspect a running syncd over its gRPC control socket.
//   syncctl [--run-dir DIR] status [--json]
//   syncctl [--run-dir DIR] watch [--json] [--interval S] [--count N]
//   syncctl [--run-dir DIR] drain [--timeout S]
//   syncctl [--run-dir DIR] timeline start FILE [--seconds S | --cycles N]
//   syncctl [--run-dir DIR] timeline stop
//   syncctl report TIMELINE.json -o report.html
// The job subcommands (syncctl job ...) are in syncctl_jobs.cc.
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>
#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <thread>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "daemon/base/affinity.h"
#include "daemon/base/version.h"
#include "daemon/cli/syncctl.h"
#include "syncd.grpc.pb.h"

namespace syncctl {

std::string Bytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

// One JSON object on a line, every field shown, by its proto name.
void PrintJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions opts;
  opts.always_print_primitive_fields = true;
  opts.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, opts);
  printf("%s\n", out.c_str());
}

int NoDaemon(const std::string& run_dir, const grpc::Status& st) {
  fprintf(stderr, "syncctl: no syncd answers at %s/control.sock: %s\n", run_dir.c_str(), st.error_message().c_str());
  return 1;
}

}  // namespace syncctl

namespace {

using namespace syncctl;

syncd::CoreSet Cores(const google::protobuf::RepeatedField<uint32_t>& f) { return {f.begin(), f.end()}; }

void PrintStall(const syncd::control::Stall& st) {
  std::string missing, submitted;
  for (uint32_t m : st.missing_ranks()) missing += (missing.empty() ? "" : ",") + std::to_string(m);
  for (uint32_t m : st.submitted_ranks()) submitted += (submitted.empty() ? "" : ",") + std::to_string(m);
  if (!st.transfer().empty()) {  // a send or receive: one rank waits for one (or, receiving, any)
    printf("  WAITING  %s of tensor '%s' (tag %lld) by rank %s waiting %.0f s for %s\n", st.transfer().c_str(),
           st.name().c_str(), (long long)st.tag(), submitted.c_str(), st.waiting_s(),
           missing.empty() ? "a send from any rank" : ("rank " + missing).c_str());
    return;
  }
  printf("  STALLED  tensor '%s' waiting %.0f s for ranks %s%s\n", st.name().c_str(), st.waiting_s(), missing.c_str(),
         submitted.empty() ? "" : (" (submitted by ranks " + submitted + ")").c_str());
}

void PrintTopo(const syncd::control::Topo& t) {
  const std::string gpu =
      t.plan_gpu_tensors() ? " (" + std::to_string(t.plan_gpu_tensors()) + " in GPU memory)" : std::string();
  printf("  topo     plan %s: %lu tensors%s in %lu groups%s\n", t.plan_hash().c_str(), (unsigned long)t.plan_tensors(),
         gpu.c_str(), (unsigned long)t.plan_groups(), t.in_use() ? "" : "   (registered, not used: --coord is not topo)");
  if (t.in_use())
    printf("           %lu steps   %lu groups run   %lu tensors   waiting for group %u   negotiated outside the plan %lu\n",
           (unsigned long)t.steps(), (unsigned long)t.groups_executed(), (unsigned long)t.tensors_executed(),
           t.next_group(), (unsigned long)t.fallback_tensors());
}

void PrintCoordination(const syncd::control::Coordination& c) {
  printf("  coord    %s   %lu cycles, %.3f ms each   coordinating %.1f ms in all   coordinator rounds %lu\n",
         c.mode().c_str(), (unsigned long)c.cycles(), c.mean_cycle_ms(), c.coordination_ms_total(),
         (unsigned long)c.coordinator_rounds());
  printf("  time     executing %.1f ms (%lu cycles agreed meanwhile)   blocked in collectives %.1f ms   between "
         "cycles %.1f ms\n",
         c.execution_ms_total(), (unsigned long)c.overlapped_cycles(), c.blocked_ms_total(), c.idle_ms_total());
  if (c.mode() == "gs")
    printf("  gs       %lu sleep agreements, %.1f ms agreed sleep\n", (unsigned long)c.sleep_agreements(),
           c.agreed_sleep_ms_total());
  printf("  messages %lu sent to coordinate (%s)%s\n", (unsigned long)c.coordination_messages(),
         Bytes(c.coordination_bytes()).c_str(),
         c.mode() == "topo" ? ("   " + std::to_string(c.cycle_requests()) + " cycles requested").c_str() : "");
  printf("  cache    hits %lu   misses %lu   hit rate %.1f %%   waiting for other nodes %lu\n",
         (unsigned long)c.cache_hits(), (unsigned long)c.cache_misses(), 100.0 * c.cache_hit_rate(),
         (unsigned long)c.pending_names());
  if (!c.failure().empty()) printf("  FAILED   %s\n", c.failure().c_str());
}

// One section per process set: the global set (id 0) first.
void PrintPartial(const syncd::control::PartialOp& op) {
  std::string quorum = op.quorum() > 1 ? " quorum " + std::to_string(op.quorum()) : "";
  std::string absent;
  for (const auto& a : op.most_absent())
    absent += (absent.empty() ? "" : ", ") + std::to_string(a.rank()) + " (" + std::to_string(a.rounds()) + ")";
  printf("partial    %s   %s%s   rounds %lu   mean NAP %.2f   late %lu   waiting %lu   most absent here: %s\n",
         op.name().c_str(), op.mode().c_str(), quorum.c_str(), (unsigned long)op.rounds(), op.mean_nap(),
         (unsigned long)op.late(), (unsigned long)op.waiting(), absent.empty() ? "none" : absent.c_str());
}

// `of_job`: the node-wide view of a node service names each set's job.
void PrintProcessSet(const syncd::control::ProcessSetStatus& p, bool of_job) {
  std::string ranks;
  if (p.id() != 0)
    for (int i = 0; i < p.ranks_size(); ++i) ranks += (i ? "," : " (") + std::to_string(p.ranks(i)) + (i + 1 == p.ranks_size() ? ")" : "");
  if (of_job) printf("job %lu: ", (unsigned long)p.job());
  printf("process set %d%s   %u ranks%s on %u node%s   pending tensors %lu\n", p.id(), p.id() == 0 ? " (global)" : "",
         p.size(), ranks.c_str(), p.nodes(), p.nodes() == 1 ? "" : "s", (unsigned long)p.pending_tensors());
  uint64_t in_flight = 0;
  std::string states;
  for (const auto& in : p.requests()) {
    in_flight += in.count();
    char one[96];
    snprintf(one, sizeof(one), "   %s %lu (oldest %.1f s)", in.state().c_str(), (unsigned long)in.count(), in.oldest_s());
    if (in.count() > 0) states += one;
  }
  printf("  requests %lu in flight%s\n", (unsigned long)in_flight, states.c_str());
  for (const auto& st : p.stalls()) PrintStall(st);
  for (const auto& op : p.partial_ops()) PrintPartial(op);
  if (p.has_topo()) PrintTopo(p.topo());
  if (p.has_coordination()) PrintCoordination(p.coordination());
}

void PrintGpu(const syncd::control::Gpu& g) {
  for (const auto& d : g.devices()) printf("gpu        %s\n", d.c_str());
  printf("gpu ops    allreduce %lu   broadcast %lu   %s   NCCL ranks in the job %u\n", (unsigned long)g.allreduces(),
         (unsigned long)g.broadcasts(), Bytes(g.bytes()).c_str(), g.nccl_ranks());
  printf("ipc        %s   handles open %lu   opened %lu   cache hits %lu   closed %lu\n",
         g.ipc_cache() ? "cache on" : "cache OFF", (unsigned long)g.ipc_handles_open(),
         (unsigned long)g.ipc_handle_opens(), (unsigned long)g.ipc_handle_hits(), (unsigned long)g.ipc_handle_closes());
  printf("gpu waits  %lu on clients' stream flags, %lu on their events\n", (unsigned long)g.flag_waits(),
         (unsigned long)g.event_waits());
  printf("gpu time   map %.1f us/request   issue %.1f us/collective   device %.1f us/collective\n", g.map_us_mean(),
         g.issue_us_mean(), g.device_us_mean());
  if (g.aborts() > 0)
    printf("gpu aborts %lu   communicator rebuilt %lu times   client flags released %lu\n", (unsigned long)g.aborts(),
           (unsigned long)g.rebuilds(), (unsigned long)g.flags_released());
  if (!g.failure().empty()) printf("gpu DOWN   %s\n", g.failure().c_str());
}

// Every daemon and rank of a many-node job, as their health reports say: unresponsive ones named
// first, then the ranks that caused most waiting on their nodes.
void PrintJob(const syncd::control::StatusReply& s) {
  size_t ranks = 0;
  for (const auto& n : s.job()) ranks += n.ranks_size();
  printf("job        %d daemons, %zu ranks (each daemon's latest report, every 0.5 s; this one sent %lu messages, %s, to\n"
         "           carry them); nodes latest first: WAIT is from a node's last submission to the collective's end\n"
         "           (median), LATE how much later than the first node\n",
         s.job_size(), ranks, (unsigned long)s.health_messages_sent(), Bytes(s.health_bytes_sent()).c_str());
  for (const auto& n : s.job())
    if (n.state() != "ok")
      printf("  %s daemon of node %u (%s, pid %d): %s\n", n.state() == "waiting" ? "WAITING FOR" : "UNRESPONSIVE", n.node(),
             n.host().c_str(), n.daemon_pid(), n.why().empty() ? n.state().c_str() : n.why().c_str());
  for (const auto& n : s.job())
    for (const auto& k : n.ranks())
      if (!k.unresponsive().empty())
        printf("  UNRESPONSIVE rank %u on node %u (pid %d): %s\n", k.rank(), n.node(), k.pid(), k.unresponsive().c_str());
  std::vector<const syncd::control::JobNode*> nodes;
  for (const auto& n : s.job()) nodes.push_back(&n);
  std::stable_sort(nodes.begin(), nodes.end(), [](const auto* a, const auto* b) { return a->late_ms() > b->late_ms(); });
  printf("  %4s %-16s %8s %-13s %9s %8s %7s %12s %12s\n", "NODE", "HOST", "DAEMON", "STATE", "REPORT", "PENDING",
         "COLLS", "WAIT ms", "LATE ms");
  for (const auto* n : nodes) {
    char late[32] = "-";
    if (n->late_ms() >= 0) snprintf(late, sizeof(late), "%.2f", n->late_ms());
    printf("  %4u %-16.16s %8d %-13s %7.1f s %8lu %7lu %12.2f %12s\n", n->node(), n->host().c_str(), n->daemon_pid(),
           n->state().c_str(), n->report_age_s(), (unsigned long)n->pending_tensors(), (unsigned long)n->collectives(),
           n->wait_p50_ms(), late);
  }
  std::vector<std::pair<const syncd::control::JobRank*, uint32_t>> rows;
  for (const auto& n : s.job())
    for (const auto& k : n.ranks()) rows.emplace_back(&k, n.node());
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto& a, const auto& b) { return a.first->job_late_ms() > b.first->job_late_ms(); });
  printf("  ranks latest first: JOB LATE behind the first node; LAST, NODE LATE and WAIT CAUSED within the rank's node\n");
  printf("  %5s %4s %8s %-9s %10s %-10s %12s %6s %12s %12s\n", "RANK", "NODE", "PID", "STATE", "LAST SEEN", "PROCESS",
         "JOB LATE ms", "LAST", "NODE LATE ms", "WAIT CAUSED");
  for (const auto& [k, node] : rows) {
    char seen[32] = "-", job_late[32] = "-";
    if (k->last_seen_s() >= 0) snprintf(seen, sizeof(seen), "%.1f s", k->last_seen_s());
    if (k->job_late_ms() >= 0) snprintf(job_late, sizeof(job_late), "%.2f", k->job_late_ms());
    printf("  %5u %4u %8d %-9s %10s %-10s %12s %5.0f%% %12.2f %11.1f%%\n", k->rank(), node, k->pid(), k->state().c_str(),
           seen, k->process().c_str(), job_late,
           k->collectives() ? 100.0 * double(k->last()) / double(k->collectives()) : 0.0, k->mean_late_ms(),
           100.0 * k->wait_share());
  }
}

// Wall-clock time as HH:MM:SS (the status's when), or "" for none.
std::string ClockTime(double unix_s) {
  if (unix_s <= 0) return "";
  char when[16];
  const time_t t = time_t(unix_s);
  tm local{};
  strftime(when, sizeof(when), "%H:%M:%S", localtime_r(&t, &local));
  return when;
}

// Elastic jobs: the ranks lost, then each change of the job's membership (nodes lost, ranks back).
void PrintLosses(const syncd::control::StatusReply& s) {
  const std::string went_on = "the job went on without it (--on-loss " + s.on_loss() + ")";
  for (const auto& c : s.clients()) {
    if ((c.state() != "lost" && c.state() != "left") || c.lost_why().empty()) continue;
    const std::string when = ClockTime(c.lost_unix_s());
    char grace[96];
    snprintf(grace, sizeof(grace), "it may attach again within %.1f s (its rejoin grace)", c.rejoin_grace_left_s());
    printf("  %s rank %u%s: %s; %s\n", c.state() == "left" ? "LEFT" : "LOST", c.rank(),
           when.empty() ? "" : (" at " + when).c_str(), c.lost_why().c_str(),
           c.job_went_on()                ? went_on.c_str()
           : c.rejoin_grace_left_s() > 0 ? grace
                                          : "the job ended");
  }
  for (const auto& m : s.membership_changes())
    printf("  MEMBERSHIP %u at %s: %s\n", m.membership(), ClockTime(m.unix_s()).c_str(), m.why().c_str());
}

// The ranks attached here (every job's, in a node service's view of all), and the elastic policy.
void PrintClients(const syncd::control::StatusReply& s) {
  size_t attached = 0;
  for (const auto& c : s.clients()) attached += c.state() == "attached";
  if (s.node_service() && s.job_id() == 0)  // every job's ranks, each job its own local ranks
    printf("clients    %zu attached, of %d jobs (syncctl status --job ID: one job's)\n", attached, s.jobs_size());
  else
    printf("clients    %zu attached of %u local ranks\n", attached, s.local_size());
  if (s.on_loss() == "continue" || s.on_loss() == "restore")
    printf("elastic    --on-loss %s: a rank or node lost, the job goes on without it%s\n", s.on_loss().c_str(),
           s.on_loss() == "restore" ? " after its collective in flight fails on every rank (hvd.elastic.run restores)"
                                    : "");
  if (s.clients_size() > 0) {
    // The node-wide view of a node service: each rank's job first (every job has a rank 0).
    const bool jobs = s.node_service() && s.job_id() == 0;
    if (jobs) printf("  %-12s", "JOB");
    printf("  %5s %5s %8s %-9s %10s %12s %7s %5s %5s %10s %-10s\n", "RANK", "LOCAL", "PID", "STATE", "OPS", "BYTES",
           "ERRORS", "SUBQ", "COMPQ", "LAST SEEN", "PROCESS");
    for (const auto& c : s.clients()) {
      char seen[32] = "-";
      if (c.last_seen_s() >= 0) snprintf(seen, sizeof(seen), "%.1f s", c.last_seen_s());
      if (jobs) printf("  %-12lu", (unsigned long)c.job());
      printf("  %5u %5u %8d %-9s %10lu %12s %7lu %5u %5u %10s %-10s\n", c.rank(), c.local_rank(), c.pid(),
             c.state().c_str(), (unsigned long)c.ops(), Bytes(c.bytes()).c_str(), (unsigned long)c.errors(),
             c.submit_depth(), c.completion_depth(), seen, c.process().c_str());
    }
    for (const auto& c : s.clients())
      if (!c.unresponsive().empty()) printf("  UNRESPONSIVE rank %u (pid %d): %s\n", c.rank(), c.pid(), c.unresponsive().c_str());
    PrintLosses(s);
  }
}

void PrintTable(const syncd::control::StatusReply& s) {
  // A node service's own view: each job has its node rank (JOB's NODE); one job's view, that job's.
  char where[48];
  if (s.node_service() && s.job_id() == 0) snprintf(where, sizeof(where), "node service");
  else snprintf(where, sizeof(where), "node %u of %u", s.node_rank(), s.node_count());
  printf("syncd %s   %s   up %.1f s   %s%s\n", s.version().c_str(), where, s.uptime_s(), s.run_dir().c_str(),
         s.draining() ? "   DRAINING (no new clients)" : "");
  printf("cores      daemon %s   workers %s\n",
         s.pinned_cores().empty() ? "(not pinned)" : syncd::FormatCoreList(Cores(s.pinned_cores())).c_str(),
         syncd::FormatCoreList(Cores(s.worker_cores())).c_str());
  if (s.node_service()) PrintJobs(s);
  PrintClients(s);
  printf("ops       ");
  for (const auto& k : s.ops().kinds()) printf(" %s %lu  ", k.kind().c_str(), (unsigned long)k.ops());
  printf(" errors %lu\n", (unsigned long)s.ops().errors());
  printf("fusion     %lu fused ops, %.2f tensors each, threshold %s   reduced %s\n", (unsigned long)s.fused_ops(),
         s.mean_tensors_per_fusion(), Bytes(s.fusion_threshold_bytes()).c_str(), Bytes(s.bytes_reduced()).c_str());
  if (s.compression() != "none" && !s.compression().empty())
    printf("compression %s between nodes for allreduces from %s that leave it to the daemon\n", s.compression().c_str(),
           Bytes(s.compression_min_bytes()).c_str());
  for (const auto& c : s.compressed())
    printf("compressed %lu allreduce tensors crossed the nodes in %s: %s as %s\n", (unsigned long)c.tensors(),
           c.compression().c_str(), Bytes(c.tensor_bytes()).c_str(), Bytes(c.wire_bytes()).c_str());
  if (const auto& r = s.residuals(); r.tensors() + r.evicted() + r.refused() + r.cleared() > 0)
    printf("residuals  %lu tensors' error feedback, %s of %s   evicted %lu, refused %lu, cleared %lu\n",
           (unsigned long)r.tensors(), Bytes(r.bytes()).c_str(), Bytes(r.capacity_bytes()).c_str(),
           (unsigned long)r.evicted(), (unsigned long)r.refused(), (unsigned long)r.cleared());
  printf("engine     busy %.2f %%   cpu %.2f s (daemon %.2f s)   wake-ups %lu   waits: %s", s.engine_busy_pct(),
         s.engine_cpu_s(), s.daemon_cpu_s(), (unsigned long)s.engine_wakeups(),
         s.engine_wait().empty() ? "-" : s.engine_wait().c_str());
  if (s.engine_core_wait_pct() >= 0) printf(" (%.0f %% of its time waiting for a core)", s.engine_core_wait_pct());
  printf("\n");
  if (const uint64_t n = s.collectives_completed(); n > 0)
    printf("           per collective (%lu): %.1f us engine cpu   %.2f wake-ups   %.2f turns with work   %.2f messages   "
           "%.2f client wakes\n",
           (unsigned long)n, s.engine_cpu_s() * 1e6 / double(n), double(s.engine_wakeups()) / double(n),
           double(s.engine_work_turns()) / double(n), double(s.engine_messages()) / double(n),
           double(s.client_wakes()) / double(n));
  printf("requests   %lu in flight", (unsigned long)s.open_requests());
  if (s.requests_finished_twice() > 0)
    printf("   %lu SECOND COMPLETIONS REFUSED (a bug: see the log)", (unsigned long)s.requests_finished_twice());
  if (s.completion_events_dropped() > 0)
    printf("   %lu completion events dropped (metrics miss those tensors)", (unsigned long)s.completion_events_dropped());
  printf("\n");
  if (!s.metrics_url().empty()) printf("metrics    %s\n", s.metrics_url().c_str());
  if (s.timeline().on() || s.timeline().events() > 0) {
    const auto& t = s.timeline();
    printf("timeline   %s %s   %lu events recorded here, %lu dropped", t.on() ? "RECORDING" : "stopped",
           t.file().c_str(), (unsigned long)t.events(), (unsigned long)t.dropped());
    if (t.bytes() > 0)
      printf("   file %lu events, %s%s", (unsigned long)t.written(), Bytes(t.bytes()).c_str(),
             t.cut() ? (", " + std::to_string(t.cut()) + " cut at the size cap").c_str() : "");
    printf("\n");
    for (int i = 1; i < t.clock_offset_us_size(); ++i)
      printf("  clock of node %d: %+.1f us from node 0's, within %.1f us\n", i, t.clock_offset_us(i), t.clock_error_us(i));
  }
  if (s.stragglers_size() > 0) {
    printf("stragglers this node's ranks over the last %lu collectives (window %lu), most waiting caused first\n",
           (unsigned long)s.straggler_collectives(), (unsigned long)s.straggler_window());
    printf("  %5s %8s %13s %12s %12s\n", "RANK", "LAST", "MEAN LATE ms", "P95 LATE ms", "WAIT CAUSED");
    for (const auto& g : s.stragglers())
      printf("  %5u %7.0f%% %13.2f %12.2f %11.1f%%\n", g.rank(),
             g.collectives() ? 100.0 * double(g.last()) / double(g.collectives()) : 0.0, g.mean_late_ms(),
             g.p95_late_ms(), 100.0 * g.wait_share());
  }
  if (s.has_gpu()) PrintGpu(s.gpu());
  if (s.has_coordination()) {
    std::string peers;
    for (const auto& p : s.coordination().peers()) peers += " node " + std::to_string(p.node()) + " " + p.state() + ";";
    printf("peers     %s\n", peers.c_str());
  }
  if (s.job_size() > 0) PrintJob(s);
  for (const auto& p : s.process_sets()) PrintProcessSet(p, s.node_service() && s.job_id() == 0);
}

// syncctl report: share/syncd/timeline_report.py (beside bin/, as installed and in the build tree)
// under Debian's python3, which has matplotlib.
int Report(const std::string& in, const std::string& out) {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::filesystem::path script = exe.parent_path().parent_path() / "share" / "syncd" / "timeline_report.py";
  if (ec || !std::filesystem::exists(script)) {
    fprintf(stderr, "syncctl report: %s is missing (install syncd with its share/ directory)\n", script.c_str());
    return 1;
  }
  const std::string s = script.string();
  execl("/usr/bin/python3", "python3", s.c_str(), in.c_str(), "-o", out.c_str(), static_cast<char*>(nullptr));
  fprintf(stderr, "syncctl report: cannot run /usr/bin/python3: %s\n", strerror(errno));
  return 1;
}


// syncctl drain.
int DrainDaemon(ControlStub& stub, const std::string& run_dir, double timeout_s) {
  grpc::ClientContext ctx;
  syncd::control::DrainRequest req;
  req.set_timeout_s(timeout_s);
  syncd::control::DrainReply reply;
  grpc::Status st = stub.Drain(&ctx, req, &reply);
  if (!st.ok()) return NoDaemon(run_dir, st);
  printf("drained syncd at %s in %.2f s: %lu requests finished, %lu failed%s\n", run_dir.c_str(), reply.seconds(),
         (unsigned long)reply.completed(), (unsigned long)reply.failed(),
         reply.deadline_passed() ? " (the timeout passed)" : "");
  return 0;
}

// syncctl timeline start|stop.
int CommandTimeline(ControlStub& stub, const std::string& run_dir, const syncd::control::TimelineRequest& req) {
  grpc::ClientContext ctx;
  syncd::control::TimelineReply reply;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Status st = stub.Timeline(&ctx, req, &reply);
  if (st.error_code() == grpc::StatusCode::UNAVAILABLE && st.error_message().find("timeline") == std::string::npos)
    return NoDaemon(run_dir, st);
  if (!st.ok()) {
    fprintf(stderr, "syncctl: %s\n", st.error_message().c_str());
    return 1;
  }
  if (!req.stop()) printf("timeline: node 0 writes %s\n", req.file().c_str());
  else printf("timeline: stopped; node 0 finishes the file\n");
  return 0;
}

// syncctl status --job ID: whether the daemon's status is that job's. Empty when it is; else why
// not, as a line to print (a job registered but not running here, one not registered, another job).
std::string NotTheJob(const syncd::control::StatusReply& s, uint64_t job) {
  const std::string name = "job " + std::to_string(job);
  if (s.job_id() == job) return "";
  if (!s.node_service())
    return name + " is not the job of this daemon at " + s.run_dir() +
           (s.job_id() != 0 ? " (it serves job " + std::to_string(s.job_id()) + ")" : " (no job has named itself yet)");
  for (const auto& j : s.jobs())
    if (j.job() == job) return name + " is registered here but not running: none of its ranks attached yet";
  return name + " is not registered with this node's daemon";
}

// syncctl status (once) and watch (every `interval_s`, `count` times; 0: until stopped); with
// `job`, only while that job is the one served.
int ShowStatus(ControlStub& stub, const std::string& run_dir, bool json, bool watch, double interval_s, uint64_t count,
               uint64_t job) {
  for (uint64_t n = 1;; ++n) {
    grpc::ClientContext status_ctx;
    status_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    syncd::control::StatusReply reply;
    syncd::control::StatusRequest request;
    request.set_job(job);  // a node service serving several jobs answers with that one's view
    grpc::Status st = stub.Status(&status_ctx, request, &reply);
    if (!st.ok()) return NoDaemon(run_dir, st);
    if (job != 0)
      if (const std::string why = NotTheJob(reply, job); !why.empty()) {
        fprintf(stderr, "syncctl: %s\n", why.c_str());
        return 1;
      }
    if (json) {
      PrintJson(reply);
    } else {
      if (watch) printf("\033[H\033[2J");  // home, clear: redraw in place
      PrintTable(reply);
    }
    fflush(stdout);
    if (!watch || (count != 0 && n >= count)) return 0;
    std::this_thread::sleep_for(std::chrono::duration<double>(interval_s));
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"syncctl: inspect a running syncd"};
  const char* env_dir = getenv("SYNCD_RUN_DIR");
  std::string run_dir = env_dir ? env_dir : std::string(getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp") + "/syncd-" +
                                                std::to_string(getuid());
  app.add_option("--run-dir", run_dir, "The daemon's run directory [env SYNCD_RUN_DIR]");
  bool json = false;
  CLI::App* status = app.add_subcommand("status", "Clients, cores, operations and engine state");
  status->add_flag("--json", json, "Print the status as one JSON object");
  uint64_t status_job = 0;
  status->add_option("--job", status_job, "Only this job's view (exit 1, saying why, when the daemon does not serve it now)");
  CLI::App* watch = app.add_subcommand("watch", "status, refreshed every second (like top); Ctrl-C ends it");
  watch->add_option("--job", status_job, "Only this job's view");
  watch->add_flag("--json", json, "One JSON object per refresh, a line each");
  double interval_s = 1.0;
  watch->add_option("--interval", interval_s, "Seconds between refreshes")->check(CLI::Range(0.05, 3600.0));
  uint64_t count = 0;
  watch->add_option("--count", count, "Stop after this many refreshes (0: never)");
  CLI::App* drain = app.add_subcommand(
      "drain", "Graceful stop: no new clients, in-flight collectives finish (or fail at the timeout), the daemon exits 0");
  double drain_timeout = -1;
  drain->add_option("--timeout", drain_timeout, "Seconds in-flight collectives get (default: the daemon's --drain-timeout)");
  CLI::App* timeline = app.add_subcommand("timeline", "The job's timeline (Chrome trace JSON; node 0 writes it)");
  CLI::App* timeline_start = timeline->add_subcommand("start", "Start recording every node's events into FILE");
  std::string timeline_file;
  double timeline_seconds = 0;
  uint64_t timeline_cycles = 0;
  timeline_start->add_option("FILE", timeline_file, "The trace file (on node 0's machine; relative to this directory)")
      ->required();
  auto* seconds_opt = timeline_start->add_option("--seconds", timeline_seconds, "Stop after this many seconds")
                          ->check(CLI::Range(0.001, 1e7));
  timeline_start->add_option("--cycles", timeline_cycles, "Stop after this many coordination cycles that ran tensors")
      ->excludes(seconds_opt);
  CLI::App* timeline_stop = timeline->add_subcommand("stop", "Stop recording; node 0 finishes the file");
  uint64_t timeline_job = 0;
  for (CLI::App* sub : {timeline_start, timeline_stop})
    sub->add_option("--job", timeline_job, "A node service's job (needed where it runs several)");
  timeline->require_subcommand(1);
  JobCommands jobs;
  AddJobCommands(app, &json, &jobs);
  CLI::App* report = app.add_subcommand("report", "A self-contained HTML page of plots from a timeline file");
  std::string report_in, report_out;
  report->add_option("TIMELINE", report_in, "The timeline (Chrome trace JSON) a daemon wrote")
      ->required()
      ->check(CLI::ExistingFile);
  report->add_option("-o,--output", report_out, "The HTML page to write")->required();
  app.require_subcommand(1);
  app.set_version_flag("--version", syncd::VersionLine("syncctl"), "Print the version and the protocols it speaks, and exit");
  CLI11_PARSE(app, argc, argv);
  if (report->parsed()) return Report(report_in, report_out);

  auto channel = grpc::CreateChannel("unix:" + run_dir + "/control.sock", grpc::InsecureChannelCredentials());
  auto stub = syncd::control::Control::NewStub(channel);
  if (drain->parsed()) return DrainDaemon(*stub, run_dir, drain_timeout);
  if (const int rc = RunJobCommand(*stub, run_dir, jobs, json); rc >= 0) return rc;
  if (timeline->parsed()) {
    syncd::control::TimelineRequest req;
    req.set_stop(timeline_stop->parsed());
    req.set_job(timeline_job);
    if (timeline_start->parsed()) {
      std::error_code ec;
      const std::filesystem::path abs = std::filesystem::absolute(timeline_file, ec);
      req.set_file(ec ? timeline_file : abs.string());
      req.set_seconds(timeline_seconds);
      req.set_cycles(timeline_cycles);
    }
    return CommandTimeline(*stub, run_dir, req);
  }
  return ShowStatus(*stub, run_dir, json, watch->parsed(), interval_s, count, status_job);
}
