#include "daemon/obs/prometheus.h"

#include <prometheus/text_serializer.h>

#include <limits>
#include <map>
#include <utility>

#include "daemon/base/version.h"
#include "proto/status_names.h"

namespace syncd {
namespace {

using Labels = std::vector<std::pair<std::string, std::string>>;
using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

// Builds the families in prometheus-cpp's data model; every sample gets the node-level labels
// first. A family's samples follow its declaration (Family), whose type they take.
class Exposition {
 public:
  explicit Exposition(Labels base) : base_(std::move(base)) {}

  void Family(const std::string& name, const char* type, const char* help) {
    const std::string t = type;
    families_.push_back(MetricFamily{name, help,
                                     t == "counter" ? MetricType::Counter
                                     : t == "histogram" ? MetricType::Histogram
                                                        : MetricType::Gauge,
                                     {}});
  }

  template <typename T>
  void Sample(const std::string& name, const Labels& labels, T value) {
    ClientMetric& m = Add(labels);
    if (families_.back().type == MetricType::Counter) {
      m.counter.value = double(value);
    } else {
      m.gauge.value = double(value);
    }
  }

  // One family's single sample.
  template <typename T>
  void Metric(const std::string& name, const char* type, const char* help, T value) {
    Family(name, type, help);
    Sample(name, {}, value);
  }

  template <size_t N>
  void Histogram(const std::string& name, const Labels& labels, const std::array<double, N>& bounds,
                 const syncd::Histogram<N>& h) {
    ClientMetric& m = Add(labels);
    uint64_t cumulative = 0;
    for (size_t i = 0; i <= N; ++i) {
      cumulative += h.counts[i];
      m.histogram.bucket.push_back({cumulative, i < N ? bounds[i] : std::numeric_limits<double>::infinity()});
    }
    m.histogram.sample_sum = h.sum;
    m.histogram.sample_count = h.count;
  }

  std::vector<MetricFamily> Take() { return std::move(families_); }

 private:
  ClientMetric& Add(const Labels& labels) {
    ClientMetric& m = families_.back().metric.emplace_back();
    for (const Labels* ls : {static_cast<const Labels*>(&base_), &labels})
      for (const auto& [k, v] : *ls) m.label.push_back(ClientMetric::Label{k, v});
    return m;
  }

  Labels base_;
  std::vector<MetricFamily> families_;
};

double Seconds(uint64_t ns) { return double(ns) / 1e9; }

// A job's per-collective and straggler figures and the labels of their series: a daemon of one
// job, its own (the node's labels name the job); jobs side by side, each one's with its job_id.
struct JobSeries {
  Labels labels;
  const CollectiveMetricsMap* collectives;
  const std::vector<StragglerRank>* stragglers;
};

std::vector<JobSeries> PerJob(const StatusSnapshot& s) {
  if (!s.side_by_side) return {JobSeries{{}, &s.collectives, &s.stragglers}};
  std::vector<JobSeries> out;
  for (const auto& [job, f] : s.job_figures) out.push_back({{{"job_id", std::to_string(job)}}, &f.collectives, &f.stragglers});
  return out;
}

// A process set's series: its id, and its job's where jobs are side by side (each has a set 0).
Labels SetLabels(const StatusSnapshot& s, const ProcessSetSnapshot& p) {
  Labels l{{"process_set", std::to_string(p.id)}};
  if (s.side_by_side) l.emplace_back("job_id", std::to_string(p.job_id));
  return l;
}

Labels With(Labels l, const Labels& more) {
  l.insert(l.end(), more.begin(), more.end());
  return l;
}

void Clients(const StatusSnapshot& s, Exposition* e) {
  std::map<std::string, uint64_t> by_state = {{"attached", 0}, {"lost", 0}, {"left", 0}, {"vacant", 0}};
  uint64_t went_on = 0;
  for (const ClientSnapshot& c : s.clients) {
    ++by_state[by_state.count(c.state) ? c.state : "lost"];
    went_on += c.job_went_on && c.state == "lost";
  }
  e->Family("syncd_clients", "gauge",
            "Ranks of this node by state: attached, lost (exited or killed while attached), left (detached between "
            "collectives and not back in time, the job going on: --on-loss continue or restore) or vacant (a slot no "
            "rank has held yet, --vacant-ranks).");
  for (const auto& [state, n] : by_state) e->Sample("syncd_clients", {{"state", state}}, n);
  e->Family("syncd_ranks_lost_job_went_on", "gauge",
            "Ranks of this node the job lost and went on without (--on-loss continue), this job.");
  e->Sample("syncd_ranks_lost_job_went_on", {}, went_on);
  e->Family("syncd_job_on_loss", "gauge",
            "The job's loss policy (--on-loss; jobs side by side: each job's own, job add --on-loss): 1 for the one "
            "it runs under (fail, continue or restore), 0 for the others.");
  for (const char* policy : {"fail", "continue", "restore"}) {
    if (!s.side_by_side) {
      e->Sample("syncd_job_on_loss", {{"policy", policy}}, std::string(policy) == s.on_loss ? 1 : 0);
      continue;
    }
    for (const JobUsage& u : s.jobs)
      e->Sample("syncd_job_on_loss", {{"job_id", std::to_string(u.job_id)}, {"policy", policy}},
                std::string(policy) == u.on_loss ? 1 : 0);
  }
  e->Family("syncd_job_membership_changes", "gauge",
            "Times this job lost nodes and went on without them (--on-loss continue or restore), this job.");
  e->Sample("syncd_job_membership_changes", {}, double(s.membership_changes.size()));
  struct PerRank {
    const char* name;
    const char* type;
    const char* help;
    uint64_t (*value)(const ClientSnapshot&);
  };
  static const PerRank kPerRank[] = {
      {"syncd_rank_requests_total", "counter", "Collective requests of this rank completed successfully.",
       [](const ClientSnapshot& c) { return c.ops; }},
      {"syncd_rank_bytes_total", "counter", "Input bytes of this rank's completed requests.",
       [](const ClientSnapshot& c) { return c.bytes; }},
      {"syncd_rank_errors_total", "counter", "Requests of this rank that completed with an error.",
       [](const ClientSnapshot& c) { return c.errors; }},
      {"syncd_rank_submit_queue_depth", "gauge", "Entries waiting in this rank's submission ring.",
       [](const ClientSnapshot& c) { return uint64_t(c.submit_depth); }},
  };
  // Jobs side by side each have a rank 0: their ranks carry their job's id.
  const auto rank = [&s](const ClientSnapshot& c) {
    Labels l{{"rank", std::to_string(c.rank)}};
    if (s.side_by_side) l.emplace_back("job_id", std::to_string(c.job_id));
    return l;
  };
  for (const PerRank& m : kPerRank) {
    e->Family(m.name, m.type, m.help);
    for (const ClientSnapshot& c : s.clients)
      if (c.state == "attached") e->Sample(m.name, rank(c), m.value(c));
  }
  e->Family("syncd_rank_unresponsive", "gauge",
            "1 while this rank holds the others up: its process is stopped, or it has not called syncd for 2 s while "
            "a tensor waits for it.");
  for (const ClientSnapshot& c : s.clients)
    if (c.state == "attached") e->Sample("syncd_rank_unresponsive", rank(c), uint64_t(!c.unresponsive.empty()));
  // Stragglers among this node's ranks, over the window `syncctl status` shows.
  e->Family("syncd_rank_lateness_seconds", "gauge",
            "Mean time this rank submitted behind the node's first submitter, over the straggler window.");
  const std::vector<JobSeries> jobs = PerJob(s);
  for (const JobSeries& j : jobs)
    for (const StragglerRank& g : *j.stragglers)
      e->Sample("syncd_rank_lateness_seconds", With({{"rank", std::to_string(g.rank)}}, j.labels), g.mean_late_ms / 1e3);
  e->Family("syncd_rank_wait_caused_ratio", "gauge",
            "Share of the node's waiting over the straggler window that this rank caused by submitting last.");
  for (const JobSeries& j : jobs)
    for (const StragglerRank& g : *j.stragglers)
      e->Sample("syncd_rank_wait_caused_ratio", With({{"rank", std::to_string(g.rank)}}, j.labels), g.wait_share);
}

// Each job served and what it had of the engine; a job's series go with it (syncctl job remove).
void Jobs(const StatusSnapshot& s, Exposition* e) {
  struct PerJob {
    const char* name;
    const char* type;
    const char* help;
    double (*value)(const JobUsage&);
  };
  static const PerJob kPerJob[] = {
      {"syncd_job_ranks", "gauge", "Ranks of this job attached here.", [](const JobUsage& u) { return double(u.ranks); }},
      {"syncd_job_requests_total", "counter", "Requests of this job's ranks completed successfully.",
       [](const JobUsage& u) { return double(u.requests); }},
      {"syncd_job_bytes_total", "counter", "Input bytes of this job's completed requests.",
       [](const JobUsage& u) { return double(u.bytes); }},
      {"syncd_job_errors_total", "counter", "Requests of this job that completed with an error.",
       [](const JobUsage& u) { return double(u.errors); }},
      {"syncd_job_engine_seconds_total", "counter", "Engine time spent on this job's rings and process sets.",
       [](const JobUsage& u) { return u.engine_s; }},
      {"syncd_job_link_bytes_total", "counter", "Bytes this job sent to its other nodes' daemons (its links).",
       [](const JobUsage& u) { return double(u.link_bytes); }},
      {"syncd_job_link_turns_waited_total", "counter",
       "Segments of this job held back for other jobs' turns on the links (shared by weight).",
       [](const JobUsage& u) { return double(u.link_turns_waited); }},
      {"syncd_job_waited_seconds_total", "counter",
       "Engine time spent on other jobs while this one had work in flight: the wait they caused it.",
       [](const JobUsage& u) { return u.waited_s; }},
  };
  for (const PerJob& m : kPerJob) {
    e->Family(m.name, m.type, m.help);
    for (const JobUsage& u : s.jobs)
      e->Sample(m.name, s.side_by_side ? Labels{{"job_id", std::to_string(u.job_id)}} : Labels{}, m.value(u));
  }
}

void Collectives(const StatusSnapshot& s, Exposition* e) {
  const std::vector<JobSeries> jobs = PerJob(s);
  // Calls f(labels, metrics) for each (job,) process set and kind.
  const auto each = [&jobs](auto&& f) {
    for (const JobSeries& j : jobs)
      for (const auto& [key, m] : *j.collectives)
        f(With({{"process_set", std::to_string(key.first)}, {"kind", key.second}}, j.labels), m);
  };
  e->Family("syncd_collectives_total", "counter",
            "Tensors completed by kind and process set (once per tensor, however many local ranks took part).");
  each([e](const Labels& l, const CollectiveMetrics& m) { e->Sample("syncd_collectives_total", l, m.ops); });
  e->Family("syncd_collective_bytes_total", "counter", "Input bytes of the local ranks' completed tensors.");
  each([e](const Labels& l, const CollectiveMetrics& m) { e->Sample("syncd_collective_bytes_total", l, m.bytes); });
  e->Family("syncd_collective_latency_seconds", "histogram",
            "From the first local rank's submission reaching the daemon to the tensor's completion.");
  each([e](const Labels& l, const CollectiveMetrics& m) {
    e->Histogram("syncd_collective_latency_seconds", l, kLatencyBounds, m.latency);
  });
  e->Family("syncd_collective_errors_total", "counter", "Tensors that completed with an error, by status code.");
  each([e](const Labels& l, const CollectiveMetrics& m) {
    for (const auto& [code, n] : m.errors) e->Sample("syncd_collective_errors_total", With(l, {{"code", code}}), n);
  });
  e->Family("syncd_fusion_group_tensors", "histogram", "Tensors per executed group of a kind that fuses.");
  e->Histogram("syncd_fusion_group_tensors", {}, kFusionBounds, s.fusion_sizes);
  // fp16 and bf16 (NONE and DEFAULT never cast): whoever asked, a rank or --compression.
  const struct {
    const char* name;
    const char* help;
    uint64_t StatusSnapshot::Compressed::*field;
  } compressed[] = {
      {"syncd_compressed_tensors_total", "Allreduce tensors whose node's sum crossed the nodes compressed.",
       &StatusSnapshot::Compressed::tensors},
      {"syncd_compressed_tensor_bytes_total", "Those tensors' bytes at their own dtype (once per tensor).",
       &StatusSnapshot::Compressed::tensor_bytes},
      {"syncd_compressed_wire_bytes_total", "The same elements at the dtype they crossed the nodes in.",
       &StatusSnapshot::Compressed::wire_bytes},
  };
  for (const auto& m : compressed) {
    e->Family(m.name, "counter", m.help);
    for (uint32_t c = SYNCD_COMPRESSION_FP16; c < SYNCD_COMPRESSION_COUNT; ++c)
      e->Sample(m.name, {{"compression", abi::CompressionName(c)}}, s.compressed[c].*m.field);
  }
  const ResidualStats& rs = s.residuals;
  e->Metric("syncd_residual_tensors", "gauge", "Tensors whose error-feedback residual this daemon holds.", rs.tensors);
  e->Metric("syncd_residual_bytes", "gauge", "Memory of those residuals (bounded by --compression-residual-bytes).",
            rs.bytes);
  e->Metric("syncd_residuals_evicted_total", "counter", "Residuals dropped to make room, least recently used first.",
            rs.evicted);
  e->Metric("syncd_residuals_refused_total", "counter",
            "Times a tensor went without error feedback: its residual did not fit.", rs.refused);
  e->Metric("syncd_residuals_cleared_total", "counter", "Residuals dropped when a job ended or its membership changed.",
            rs.cleared);
  e->Metric("syncd_stalled_tensors", "gauge",
            "Tensors some ranks submitted and others not, and sends and receives waiting for their peer, for longer "
            "than --stall-warning-s.",
            uint64_t(s.stalls.size()));
  e->Metric("syncd_stall_warnings_total", "counter", "Stall warnings logged.", s.stall_warnings);
  e->Metric("syncd_open_requests", "gauge", "Requests read off the ranks' rings and not yet completed.",
            s.open_requests);
  e->Metric("syncd_requests_finished_twice_total", "counter",
            "Second completions of one request, refused (each request completes exactly once: 0 unless a bug).",
            s.requests_finished_twice);
  e->Metric("syncd_completion_events_dropped_total", "counter",
            "Completion events the engine's full queue refused: tensors missing from the per-collective metrics and "
            "straggler figures (0 unless nothing folded them for a long time).",
            s.dropped_completion_events);
  e->Metric("syncd_health_messages_sent_total", "counter", "Messages this daemon sent to carry health reports.",
            s.health_messages);
  e->Metric("syncd_health_bytes_sent_total", "counter", "Bytes of those messages.", s.health_bytes);
}

// The other nodes' daemons: connected, and their health reports' age.
void Peers(const StatusSnapshot& s, Exposition* e) {
  e->Family("syncd_peer_up", "gauge", "1 while the daemon of that node is connected, 0 once it is lost.");
  for (const auto& [node, state] : s.peers)
    e->Sample("syncd_peer_up", {{"peer_node", std::to_string(node)}}, uint64_t(state == "connected"));
  // The job's other nodes as their health reports show them: jobs side by side on links of their
  // own, each job's (its node numbers are its own).
  struct JobPeers {
    Labels labels;
    const std::vector<NodeHealth>* nodes;
    uint32_t self;
  };
  std::vector<JobPeers> peers;
  if (!s.side_by_side) peers.push_back({{}, &s.job_nodes, s.node_rank});
  for (const JobUsage& u : s.jobs)
    if (const auto it = s.own_link_job_nodes.find(u.job_id); s.side_by_side && it != s.own_link_job_nodes.end())
      peers.push_back({{{"job_id", std::to_string(u.job_id)}}, &it->second, u.node_rank});
  e->Family("syncd_peer_report_age_seconds", "gauge",
            "Since the latest health report of that node's daemon came (reports every 0.5 s; 3 s: unresponsive).");
  for (const JobPeers& j : peers)
    for (const NodeHealth& n : *j.nodes)
      if (n.node != j.self)
        e->Sample("syncd_peer_report_age_seconds", With({{"peer_node", std::to_string(n.node)}}, j.labels), n.report_age_s);
  e->Family("syncd_peer_unresponsive", "gauge", "1 while that node's daemon has sent no health report for 3 s.");
  for (const JobPeers& j : peers)
    for (const NodeHealth& n : *j.nodes)
      if (n.node != j.self)
        e->Sample("syncd_peer_unresponsive", With({{"peer_node", std::to_string(n.node)}}, j.labels),
                  uint64_t(n.state == "unresponsive"));
}

void Coordination(const StatusSnapshot& s, Exposition* e) {
  struct PerSet {
    const char* name;
    const char* help;
    double (*value)(const NegotiationStats&);
  };
  static const PerSet kPerSet[] = {
      {"syncd_negotiation_cycles_total", "Coordination cycles run.",
       [](const NegotiationStats& n) { return double(n.cycles); }},
      {"syncd_negotiation_cycle_seconds_total",
       "Time in coordination cycles, each until its agreement is taken (a fence's: has run).",
       [](const NegotiationStats& n) { return Seconds(n.cycle_ns_total); }},
      {"syncd_negotiation_overlapped_cycles_total", "Cycles that agreed while the agreement before ran here.",
       [](const NegotiationStats& n) { return double(n.overlapped_cycles); }},
      {"syncd_coordination_seconds_total", "Time agreeing on what runs (bit-vector agreement and coordinator rounds).",
       [](const NegotiationStats& n) { return Seconds(n.coordination_ns_total); }},
      {"syncd_execution_seconds_total", "Time moving and reducing agreed tensors.",
       [](const NegotiationStats& n) { return Seconds(n.execution_ns_total); }},
      {"syncd_response_cache_hits_total", "Tensor names agreed through the response cache.",
       [](const NegotiationStats& n) { return double(n.cache_hits); }},
      {"syncd_response_cache_misses_total", "Tensor names that needed the coordinator.",
       [](const NegotiationStats& n) { return double(n.cache_misses); }},
      {"syncd_coordination_messages_total", "Point-to-point messages this daemon sent to coordinate.",
       [](const NegotiationStats& n) { return double(n.coordination_messages); }},
      {"syncd_coordination_bytes_total", "Bytes of those messages.",
       [](const NegotiationStats& n) { return double(n.coordination_bytes); }},
  };
  for (const PerSet& m : kPerSet) {
    e->Family(m.name, "counter", m.help);
    for (const ProcessSetSnapshot& p : s.process_sets)
      if (p.coordinated) e->Sample(m.name, SetLabels(s, p), m.value(p.negotiation));
  }
  e->Family("syncd_pending_tensors", "gauge", "Tensors waiting in this daemon for some of its ranks.");
  for (const ProcessSetSnapshot& p : s.process_sets)
    e->Sample("syncd_pending_tensors", SetLabels(s, p), p.pending_tensors);
  e->Family("syncd_requests", "gauge",
            "Requests in flight here by state: waiting (for local ranks or a peer), negotiating (among the nodes), "
            "agreed (their group not started), executing.");
  for (const ProcessSetSnapshot& p : s.process_sets)
    for (const ProcessSetSnapshot::RequestsIn& in : p.requests)
      e->Sample("syncd_requests", With(SetLabels(s, p), {{"state", in.state}}), in.count);
  e->Family("syncd_request_oldest_seconds", "gauge", "How long the oldest request in that state has been in it.");
  for (const ProcessSetSnapshot& p : s.process_sets)
    for (const ProcessSetSnapshot::RequestsIn& in : p.requests)
      e->Sample("syncd_request_oldest_seconds", With(SetLabels(s, p), {{"state", in.state}}), in.oldest_s);
  e->Family("syncd_topo_plan_in_use", "gauge", "1 when the set runs a registered TOPO plan.");
  for (const ProcessSetSnapshot& p : s.process_sets)
    if (p.has_plan) e->Sample("syncd_topo_plan_in_use", SetLabels(s, p), uint64_t(p.plan_in_use));
  struct PerPartialOp {
    const char* name;
    const char* type;
    const char* help;
    double (*value)(const PartialOpSnapshot&);
  };
  static const PerPartialOp kPerPartialOp[] = {
      {"syncd_partial_rounds_total", "counter", "Rounds of a partial allreduce run.",
       [](const PartialOpSnapshot& o) { return double(o.rounds); }},
      {"syncd_partial_mean_active_ranks", "gauge", "Mean ranks with a fresh contribution per round (NAP).",
       [](const PartialOpSnapshot& o) { return o.mean_nap; }},
  };
  for (const PerPartialOp& m : kPerPartialOp) {
    e->Family(m.name, m.type, m.help);
    for (const ProcessSetSnapshot& p : s.process_sets)
      for (const PartialOpSnapshot& o : p.partial_ops)
        e->Sample(m.name, With(SetLabels(s, p), {{"name", o.name}, {"mode", o.mode}}), m.value(o));
  }
  Peers(s, e);
}

void EngineMetrics(const StatusSnapshot& s, Exposition* e) {
  e->Metric("syncd_engine_busy_seconds_total", "counter", "Engine time spent on work (not polling or sleeping).",
            Seconds(s.engine_busy_ns));
  e->Metric("syncd_engine_cpu_seconds_total", "counter", "CPU time of the engine thread.", s.engine_cpu_s);
  e->Metric("syncd_daemon_cpu_seconds_total", "counter", "CPU time of the whole daemon.", s.daemon_cpu_s);
  e->Metric("syncd_engine_wakeups_total", "counter", "Times the engine woke from sleep.", s.engine_wakeups);
  e->Metric("syncd_engine_work_turns_total", "counter", "Turns of the engine's loop that did work.", s.engine_work_turns);
  e->Metric("syncd_collectives_completed_total", "counter",
            "Collectives completed with a rank of this node in them (the engine's cost per collective: its CPU, "
            "wake-ups and work turns over this).",
            s.collectives_completed);
  e->Metric("syncd_client_wakes_total", "counter", "Futex wakes of clients asleep on their doorbells.", s.client_wakes);
  e->Metric("syncd_engine_messages_total", "counter", "Messages the engine sent to other nodes' daemons.", s.engine_messages);
  e->Metric("syncd_engine_core_sharers", "gauge",
            "Other syncd daemons that may run on the engine's cores (--network-wait auto: 1 or more, it sleeps on the "
            "network; 2 or more, it yields while it spins).",
            s.engine_core_sharers);
  if (s.engine_core_wait_pct >= 0)
    e->Metric("syncd_engine_core_wait_ratio", "gauge",
              "Share of the engine thread's runnable time spent waiting for a CPU (last measured window).",
              s.engine_core_wait_pct / 100);
  if (!s.has_gpu) return;
  e->Metric("syncd_gpu_devices", "gauge", "GPUs this daemon drives.", uint64_t(s.gpu.devices));
  e->Metric("syncd_gpu_collectives_total", "counter", "GPU collectives whose work completed.", s.gpu.completed);
  e->Metric("syncd_gpu_bytes_total", "counter", "Bytes reduced or broadcast on GPUs.", s.gpu.bytes);
  e->Metric("syncd_gpu_ipc_cache_hits_total", "counter", "GPU tensors whose allocation was already open.",
            s.gpu.handle_hits);
  e->Metric("syncd_gpu_ipc_handle_opens_total", "counter", "CUDA IPC handles opened.", s.gpu.handle_opens);
  e->Metric("syncd_gpu_ipc_open_handles", "gauge", "CUDA IPC handles cached now.", s.gpu.open_handles);
  e->Metric("syncd_gpu_flag_waits_total", "counter", "Waits for a client's stream through its flag.",
            s.gpu.flag_waits);
  e->Metric("syncd_gpu_event_waits_total", "counter", "Waits for a client's stream through its event.",
            s.gpu.event_waits);
  e->Metric("syncd_gpu_aborts_total", "counter", "Times the GPU path was aborted.", s.gpu.aborts);
  e->Metric("syncd_gpu_rebuilds_total", "counter", "Times the NCCL communicators were rebuilt after an abort.",
            s.gpu.rebuilds);
}

}  // namespace

std::vector<MetricFamily> MetricFamilies(const StatusSnapshot& s) {
  // Jobs side by side: the job's series carry their own job_id, the node's none.
  Exposition e(s.side_by_side ? Labels{{"node", std::to_string(s.node_rank)}}
                              : Labels{{"job_id", std::to_string(s.job_id)}, {"node", std::to_string(s.node_rank)}});
  e.Family("syncd_info", "gauge", "Always 1: the daemon's version and coordination mode.");
  e.Sample("syncd_info", {{"version", kVersionString}, {"coord", s.coordinated ? s.coord_mode : "local"}}, uint64_t(1));
  e.Metric("syncd_uptime_seconds", "gauge", "Seconds since the daemon started.", s.uptime_s);
  e.Metric("syncd_nodes", "gauge", "Daemons in the job.", uint64_t(s.node_count));
  e.Metric("syncd_local_ranks", "gauge", "Ranks this node serves.", uint64_t(s.local_size));
  Clients(s, &e);
  Jobs(s, &e);
  Collectives(s, &e);
  Coordination(s, &e);
  EngineMetrics(s, &e);
  return e.Take();
}

std::string RenderPrometheus(const StatusSnapshot& s) { return prometheus::TextSerializer().Serialize(MetricFamilies(s)); }

}  // namespace syncd
