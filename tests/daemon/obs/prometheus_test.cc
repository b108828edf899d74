// The metrics endpoint's text: what a scraper parses. Values, labels and histogram shape are
// checked line by line; the integration test runs Prometheus itself against a daemon.
#include "daemon/obs/prometheus.h"

#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace syncd {
namespace {

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The value of the one sample whose line starts with `series` (name and labels, up to "} ").
std::string ValueOf(const std::string& text, const std::string& series) {
  std::string found;
  int n = 0;
  for (const std::string& l : Lines(text))
    if (l.rfind(series + " ", 0) == 0) {
      found = l.substr(series.size() + 1);
      ++n;
    }
  EXPECT_EQ(n, 1) << series;
  return found;
}

StatusSnapshot Snapshot() {
  StatusSnapshot s;
  s.job_id = 42;
  s.node_rank = 1;
  s.node_count = 2;
  s.local_size = 2;
  s.clients.resize(2);
  s.clients[0].rank = 2, s.clients[0].local_rank = 0, s.clients[0].pid = 100, s.clients[0].state = "attached";
  s.clients[0].ops = 7, s.clients[0].bytes = 700, s.clients[0].errors = 1;
  s.clients[1].rank = 3, s.clients[1].local_rank = 1, s.clients[1].pid = 101, s.clients[1].state = "lost";
  CollectiveMetrics& m = s.collectives[{0, "allreduce"}];
  m.ops = 3;
  m.bytes = 4096;
  for (double v : {20e-6, 0.003, 2.0}) m.latency.Observe(kLatencyBounds, v);
  m.errors["STALLED"] = 1;
  s.collectives[{5, "allgather"}].ops = 1;
  s.fusion_sizes.Observe(kFusionBounds, 3);
  s.engine_cpu_s = 1.5;
  s.stragglers = {{2, 10, 9, 50.0, 60.0, 0.75}};
  return s;
}

TEST(PrometheusTest, VacantSlotsAreCountedApartFromLostRanks) {
  StatusSnapshot s = Snapshot();
  ClientSnapshot vacant = s.clients[1];
  vacant.rank = 4;
  vacant.state = "vacant";
  vacant.job_went_on = true;  // the job goes on without it, as it does without a lost rank
  s.clients.push_back(vacant);
  s.clients[1].job_went_on = true;
  const std::string text = RenderPrometheus(s);
  const std::string node = "job_id=\"42\",node=\"1\"";
  EXPECT_EQ(ValueOf(text, "syncd_clients{" + node + ",state=\"lost\"}"), "1");
  EXPECT_EQ(ValueOf(text, "syncd_clients{" + node + ",state=\"vacant\"}"), "1");
  EXPECT_EQ(ValueOf(text, "syncd_ranks_lost_job_went_on{" + node + "}"), "1");
}

// The job's loss policy, in the word syncrun and syncctl use: 1 for the one it runs under.
TEST(PrometheusTest, TheLossPolicyIsTheOneTheJobRunsUnder) {
  StatusSnapshot s = Snapshot();
  s.on_loss = "restore";
  const std::string text = RenderPrometheus(s);
  const std::string node = "job_id=\"42\",node=\"1\"";
  EXPECT_EQ(ValueOf(text, "syncd_job_on_loss{" + node + ",policy=\"restore\"}"), "1");
  EXPECT_EQ(ValueOf(text, "syncd_job_on_loss{" + node + ",policy=\"continue\"}"), "0");
  EXPECT_EQ(ValueOf(text, "syncd_job_on_loss{" + node + ",policy=\"fail\"}"), "0");
}

TEST(PrometheusTest, CountersCarryKindSetAndTheNodeLevelLabels) {
  const std::string text = RenderPrometheus(Snapshot());
  const std::string node = "job_id=\"42\",node=\"1\"";
  EXPECT_EQ(ValueOf(text, "syncd_collectives_total{" + node + ",process_set=\"0\",kind=\"allreduce\"}"), "3");
  EXPECT_EQ(ValueOf(text, "syncd_collective_bytes_total{" + node + ",process_set=\"0\",kind=\"allreduce\"}"), "4096");
  EXPECT_EQ(ValueOf(text, "syncd_collectives_total{" + node + ",process_set=\"5\",kind=\"allgather\"}"), "1");
  EXPECT_EQ(ValueOf(text, "syncd_collective_errors_total{" + node + ",process_set=\"0\",kind=\"allreduce\",code=\"STALLED\"}"),
            "1");
  EXPECT_EQ(ValueOf(text, "syncd_rank_requests_total{" + node + ",rank=\"2\"}"), "7");
  EXPECT_EQ(ValueOf(text, "syncd_clients{" + node + ",state=\"lost\"}"), "1");
  EXPECT_EQ(ValueOf(text, "syncd_engine_cpu_seconds_total{" + node + "}"), "1.5");
  EXPECT_EQ(ValueOf(text, "syncd_rank_lateness_seconds{" + node + ",rank=\"2\"}"), "0.05");
  EXPECT_EQ(ValueOf(text, "syncd_rank_wait_caused_ratio{" + node + ",rank=\"2\"}"), "0.75");
  // A lost rank has no per-rank series; every sample has the node-level labels.
  EXPECT_EQ(text.find("rank=\"3\""), std::string::npos);
  for (const std::string& l : Lines(text)) {
    if (l[0] == '#') continue;
    EXPECT_NE(l.find("{" + node), std::string::npos) << l;
  }
}

TEST(PrometheusTest, RequestsInFlightByStateCarryTheSetAndTheState) {
  StatusSnapshot s = Snapshot();
  ProcessSetSnapshot set;
  set.id = 3;
  set.requests = {{"waiting", 2, 1.5}, {"negotiating", 0, 0}, {"agreed", 0, 0}, {"executing", 1, 0.25}};
  s.process_sets.push_back(set);
  const std::string text = RenderPrometheus(s);
  const std::string at = "{job_id=\"42\",node=\"1\",process_set=\"3\",state=";
  EXPECT_EQ(ValueOf(text, "syncd_requests" + at + "\"waiting\"}"), "2");
  EXPECT_EQ(ValueOf(text, "syncd_requests" + at + "\"negotiating\"}"), "0");
  EXPECT_EQ(ValueOf(text, "syncd_requests" + at + "\"executing\"}"), "1");
  EXPECT_EQ(ValueOf(text, "syncd_request_oldest_seconds" + at + "\"waiting\"}"), "1.5");
  EXPECT_EQ(ValueOf(text, "syncd_request_oldest_seconds" + at + "\"executing\"}"), "0.25");
}

// fp16 and bf16 each: tensors, their bytes and the bytes they crossed the nodes as (zero included,
// so that a dashboard's rate has a series from the start); NONE and DEFAULT never appear.
TEST(PrometheusTest, CompressedBytesByCompression) {
  StatusSnapshot s = Snapshot();
  s.compressed[SYNCD_COMPRESSION_BF16] = {3, 12'000, 6'000};
  const std::string text = RenderPrometheus(s);
  const std::string node = "{job_id=\"42\",node=\"1\",compression=";
  EXPECT_EQ(ValueOf(text, "syncd_compressed_tensors_total" + node + "\"bf16\"}"), "3");
  EXPECT_EQ(ValueOf(text, "syncd_compressed_tensor_bytes_total" + node + "\"bf16\"}"), "12000");
  EXPECT_EQ(ValueOf(text, "syncd_compressed_wire_bytes_total" + node + "\"bf16\"}"), "6000");
  EXPECT_EQ(ValueOf(text, "syncd_compressed_wire_bytes_total" + node + "\"fp16\"}"), "0");
  EXPECT_EQ(text.find("compression=\"none\""), std::string::npos);
  EXPECT_EQ(text.find("compression=\"default\""), std::string::npos);
}

TEST(PrometheusTest, HistogramBucketsAreCumulativeAndEndAtCount) {
  const std::string text = RenderPrometheus(Snapshot());
  const std::string series = "syncd_collective_latency_seconds_bucket{job_id=\"42\",node=\"1\",process_set=\"0\",kind=\"allreduce\",";
  EXPECT_EQ(ValueOf(text, series + "le=\"1e-05\"}"), "0");
  EXPECT_EQ(ValueOf(text, series + "le=\"2.5e-05\"}"), "1");
  EXPECT_EQ(ValueOf(text, series + "le=\"0.0025\"}"), "1");
  EXPECT_EQ(ValueOf(text, series + "le=\"0.005\"}"), "2");
  EXPECT_EQ(ValueOf(text, series + "le=\"1\"}"), "2");
  EXPECT_EQ(ValueOf(text, series + "le=\"10\"}"), "3");
  EXPECT_EQ(ValueOf(text, series + "le=\"+Inf\"}"), "3");
  EXPECT_EQ(ValueOf(text, "syncd_collective_latency_seconds_count{job_id=\"42\",node=\"1\",process_set=\"0\",kind=\"allreduce\"}"),
            "3");
  EXPECT_EQ(ValueOf(text, "syncd_collective_latency_seconds_sum{job_id=\"42\",node=\"1\",process_set=\"0\",kind=\"allreduce\"}"),
            "2.00302");
  EXPECT_EQ(ValueOf(text, "syncd_fusion_group_tensors_bucket{job_id=\"42\",node=\"1\",le=\"2\"}"), "0");
  EXPECT_EQ(ValueOf(text, "syncd_fusion_group_tensors_bucket{job_id=\"42\",node=\"1\",le=\"4\"}"), "1");
}

TEST(PrometheusTest, JobsSideBySideLabelTheirOwnSeriesAndNoSeriesTwice) {
  StatusSnapshot s;
  s.side_by_side = true;
  s.node_rank = 0;
  // Two jobs of a node service, each with its rank 0.
  s.clients.resize(2);
  s.clients[0].job_id = 7, s.clients[0].state = "attached", s.clients[0].ops = 5;
  s.clients[1].job_id = 8, s.clients[1].state = "attached", s.clients[1].ops = 9;
  s.jobs = {{.job_id = 7, .ranks = 1, .requests = 5, .engine_s = 0.25, .waited_s = 0.5},
            {.job_id = 8, .ranks = 1, .requests = 9, .engine_s = 0.75, .waited_s = 0.125, .node_rank = 1, .nodes = 2,
             .link_turns_waited = 3, .on_loss = "continue"}};
  // Each job's global set is process set 0, with collectives, stragglers and a request of its own.
  for (uint64_t job : {7, 8}) {
    ProcessSetSnapshot& p = s.process_sets.emplace_back();
    p.job_id = job;
    p.coordinated = true;
    p.negotiation.cycles = job * 10;
    p.pending_tensors = job;
    p.requests.push_back({"waiting", job, 0.5});
    JobFiguresSnapshot& f = s.job_figures[job];
    f.collectives[{0, "allreduce"}].ops = job * 100;
    f.stragglers = {{0, 10, 9, double(job), 60.0, 0.75}};
  }
  // Job 8 runs on two nodes (this one is its node 1): its other node's health, under its id.
  NodeHealth other;
  other.node = 0;
  other.state = "unresponsive";
  NodeHealth self;
  self.node = 1;
  s.own_link_job_nodes[8] = {other, self};
  const std::string text = RenderPrometheus(s);
  EXPECT_EQ(ValueOf(text, "syncd_collectives_total{node=\"0\",process_set=\"0\",kind=\"allreduce\",job_id=\"7\"}"), "700");
  EXPECT_EQ(ValueOf(text, "syncd_collectives_total{node=\"0\",process_set=\"0\",kind=\"allreduce\",job_id=\"8\"}"), "800");
  EXPECT_EQ(ValueOf(text, "syncd_rank_lateness_seconds{node=\"0\",rank=\"0\",job_id=\"8\"}"), "0.008");
  EXPECT_EQ(ValueOf(text, "syncd_pending_tensors{node=\"0\",process_set=\"0\",job_id=\"7\"}"), "7");
  EXPECT_EQ(ValueOf(text, "syncd_negotiation_cycles_total{node=\"0\",process_set=\"0\",job_id=\"8\"}"), "80");
  EXPECT_EQ(ValueOf(text, "syncd_requests{node=\"0\",process_set=\"0\",job_id=\"8\",state=\"waiting\"}"), "8");
  EXPECT_EQ(ValueOf(text, "syncd_peer_unresponsive{node=\"0\",peer_node=\"0\",job_id=\"8\"}"), "1");
  EXPECT_EQ(ValueOf(text, "syncd_rank_requests_total{node=\"0\",rank=\"0\",job_id=\"7\"}"), "5");
  EXPECT_EQ(ValueOf(text, "syncd_rank_requests_total{node=\"0\",rank=\"0\",job_id=\"8\"}"), "9");
  EXPECT_EQ(ValueOf(text, "syncd_job_requests_total{node=\"0\",job_id=\"8\"}"), "9");
  EXPECT_EQ(ValueOf(text, "syncd_job_waited_seconds_total{node=\"0\",job_id=\"7\"}"), "0.5");
  EXPECT_EQ(ValueOf(text, "syncd_job_engine_seconds_total{node=\"0\",job_id=\"8\"}"), "0.75");
  EXPECT_EQ(ValueOf(text, "syncd_job_link_turns_waited_total{node=\"0\",job_id=\"8\"}"), "3");
  // Each job's own loss policy (job add --on-loss), not the daemon's.
  EXPECT_EQ(ValueOf(text, "syncd_job_on_loss{node=\"0\",job_id=\"8\",policy=\"continue\"}"), "1");
  EXPECT_EQ(ValueOf(text, "syncd_job_on_loss{node=\"0\",job_id=\"7\",policy=\"fail\"}"), "1");
  EXPECT_EQ(ValueOf(text, "syncd_job_on_loss{node=\"0\",job_id=\"7\",policy=\"continue\"}"), "0");
  EXPECT_EQ(ValueOf(text, "syncd_uptime_seconds{node=\"0\"}"), "0");  // the node's: no job_id
  // A scraper refuses a page with one series twice.
  std::set<std::string> series;
  for (const std::string& l : Lines(text))
    if (!l.empty() && l[0] != '#') {
      EXPECT_TRUE(series.insert(l.substr(0, l.rfind(' '))).second) << l;
    }
  // A job removed: its series are gone.
  s.jobs.pop_back();
  s.clients.pop_back();
  s.process_sets.pop_back();
  s.job_figures.erase(8);
  s.own_link_job_nodes.erase(8);
  EXPECT_EQ(RenderPrometheus(s).find("job_id=\"8\""), std::string::npos);
}

TEST(PrometheusTest, EveryFamilyIsDeclaredOnceBeforeItsSamples) {
  const std::string text = RenderPrometheus(Snapshot());
  std::vector<std::string> declared;
  for (const std::string& l : Lines(text)) {
    if (l.rfind("# TYPE ", 0) == 0) {
      const std::string name = l.substr(7, l.find(' ', 7) - 7);
      for (const std::string& d : declared) EXPECT_NE(d, name) << "declared twice";
      declared.push_back(name);
    } else if (l[0] != '#') {
      const std::string name = l.substr(0, l.find('{'));
      ASSERT_FALSE(declared.empty()) << l;
      const std::string& family = declared.back();
      EXPECT_TRUE(name == family || name == family + "_bucket" || name == family + "_sum" || name == family + "_count")
          << l << " under " << family;
    }
  }
}

TEST(PrometheusTest, LabelValuesAreEscaped) {
  StatusSnapshot s;
  s.collectives[{0, "all\"reduce"}].ops = 1;
  s.collectives[{0, "a\\b\nc"}].ops = 2;
  const std::string text = RenderPrometheus(s);
  EXPECT_NE(text.find("kind=\"all\\\"reduce\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("kind=\"a\\\\b\\nc\"} 2"), std::string::npos) << text;
}

}  // namespace
}  // namespace syncd
