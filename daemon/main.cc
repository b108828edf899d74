// syncd: one per node per job. Pins itself to its dedicated cores, serves clients over shared
// memory and the control API over gRPC, and drains gracefully on SIGTERM/SIGINT or `syncctl drain`.
#include <malloc.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <algorithm>
#include <functional>
#include <mutex>
#include <thread>

#include "daemon/base/affinity.h"
#include "daemon/base/config.h"
#include "daemon/base/logging.h"
#include "daemon/base/version.h"
#include "daemon/control/attach_server.h"
#include "daemon/control/control_service.h"
#include "daemon/control/job_links.h"
#include "daemon/control/job_registry.h"
#include "daemon/control/metrics_server.h"
#include "daemon/control/notify.h"
#include "daemon/control/rendezvous.h"
#include "daemon/engine/engine.h"
#include "daemon/obs/prometheus.h"
#include "daemon/exec/gpu_executor.h"

namespace syncd {
namespace {

// 0700, or 0755 for a node service: every user's ranks reach attach.sock (and only that).
Status PrepareRunDir(const std::string& dir, bool node_service) {
  const mode_t mode = node_service ? 0755 : 0700;
  if (mkdir(dir.c_str(), mode) != 0 && errno != EEXIST) return ErrnoError("mkdir " + dir);
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) return ErrnoError("stat " + dir);
  if (!S_ISDIR(st.st_mode)) return InvalidArgument("run directory " + dir + " is not a directory");
  if (st.st_uid != geteuid())
    return Status(SYNCD_ERR_REFUSED, "run directory " + dir + " belongs to uid " + std::to_string(st.st_uid));
  if (chmod(dir.c_str(), mode) != 0) return ErrnoError("chmod " + dir);
  return Status::Ok();
}

// GPUs: one NCCL rank per visible GPU, in a communicator over every GPU of the job.
Status ProbeGpus(const Config& config, JobLinks* job) {
  if (config.gpus) {
    job->gpu = GpuExecutor::Probe(config.gpu_ipc_cache, &job->no_gpu);
    if (job->gpu && config.node_rank == 0) {
      SYNCD_ASSIGN_OR_RETURN(job->nccl_id, job->gpu->MakeNcclId());
    }
  }
  job->gpus_per_node.assign(1, job->gpu ? job->gpu->devices() : 0);
  return Status::Ok();
}

// The job's NCCL communicator, when every node has GPUs. On one node a failure leaves host
// tensors served; on many, other nodes may be waiting inside NCCL's own rendezvous, so only the
// whole job can give up.
Status ConnectGpus(const Config& config, JobLinks* job) {
  if (!job->gpu) return Status::Ok();
  for (uint32_t n = 0; n < job->gpus_per_node.size(); ++n)
    if (job->gpus_per_node[n] == 0) {
      job->no_gpu = "node " + std::to_string(n) + " of the job has no GPU, so GPU collectives cannot span the job";
      job->gpu.reset();
      return Status::Ok();
    }
  if (Status st = job->gpu->Connect(job->nccl_id, job->gpus_per_node, config.node_rank, config.join_timeout_s);
      !st.ok()) {
    if (config.nodes > 1) return st;
    spdlog::error("no GPU collectives: {}", st.message());
    job->no_gpu = st.message();
    job->gpu.reset();
  }
  return Status::Ok();
}

// The main thread from here on: takes SIGTERM/SIGINT (the first drains, a second fails what is in
// flight at once) and feeds systemd's watchdog while the engine is healthy, until it finishes.
void WatchUntilFinished(const Config& config, const Engine& engine, const NodePage& node_page, sigset_t signals,
                        const std::function<void(double, const std::string&)>& begin_drain) {
  const uint64_t watchdog_us = WatchdogIntervalUs();
  const uint64_t tick_ns = watchdog_us ? std::min<uint64_t>(watchdog_us * 250, 200'000'000) : 200'000'000;
  int signals_seen = 0;
  while (!engine.finished()) {
    const timespec tick{time_t(tick_ns / 1'000'000'000), long(tick_ns % 1'000'000'000)};
    const int sig = sigtimedwait(&signals, nullptr, &tick);
    if (sig == SIGTERM || sig == SIGINT) {
      const char* name = sig == SIGTERM ? "SIGTERM" : "SIGINT";
      if (signals_seen++ == 0) {
        begin_drain(double(config.drain_timeout_s), name);
      } else {
        spdlog::warn("second {}: failing what is in flight now", name);
        begin_drain(0, name);
      }
    }
    const uint64_t beat = node_page.page()->engine_heartbeat_ns.load(std::memory_order_relaxed);
    if (watchdog_us && EngineHealthy(beat, abi::MonotonicNs(), watchdog_us)) NotifyService("WATCHDOG=1");
  }
}

int Fail(const Status& st) {
  spdlog::error("{}", st.ToString());
  NotifyService("STATUS=failed: " + st.message() + "\nERRNO=1");
  return 1;
}

// Process-wide setup, before any thread exists: memory, logging, the run directory, the daemon's
// cores (pinned now, so that every thread of the daemon inherits them) and the signals only the
// main thread takes (SIGTERM, SIGINT, in *signals).
StatusOr<CorePartition> SetUpProcess(const Config& config, sigset_t* signals) {
  // Collectives take scratch buffers of up to a pipeline segment per step: keep such memory in
  // the heap instead of mapping, zero-filling and unmapping it on every step.
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  // UCX's TCP transport sends 8 KiB segments by default: between two daemons over TCP (loopback,
  // one rank each) a 64 KiB allreduce took 293 us, and 50 us with 256 KiB segments (OpenMPI's TCP
  // BTL: 45 us). UCX reads these when it starts; the user's own settings win.
  setenv("UCX_TCP_TX_SEG_SIZE", "256k", 0);
  setenv("UCX_TCP_RX_SEG_SIZE", "256k", 0);
  SetupLogging(config.log_level, config.node_rank);
  umask(077);
  SYNCD_RETURN_IF_ERROR(PrepareRunDir(config.run_dir, config.node_service));
  SYNCD_ASSIGN_OR_RETURN(CorePartition cores, ResolveCores(config.cores));
  SYNCD_RETURN_IF_ERROR(PinCurrentThread(cores.daemon));
  sigemptyset(signals);
  sigaddset(signals, SIGTERM);
  sigaddset(signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return cores;
}

// RUN_DIR/metrics.url: where a launcher, a test or a site's file-based service discovery finds
// the endpoint when --metrics-port 0 picked the port. Written whole, then renamed into place.
Status WriteMetricsUrl(const std::string& run_dir, const std::string& url) {
  const std::string path = run_dir + "/metrics.url", tmp = path + ".tmp";
  FILE* f = fopen(tmp.c_str(), "w");
  if (f == nullptr) return ErrnoError("cannot write " + tmp);
  const bool ok = fprintf(f, "%s\n", url.c_str()) > 0;
  if (fclose(f) != 0 || !ok || rename(tmp.c_str(), path.c_str()) != 0) return ErrnoError("cannot write " + path);
  return Status::Ok();
}

void AnnounceServing(const Config& config, const CorePartition& cores) {
  spdlog::info("syncd {} serving {} (daemon cores: {}, worker cores: {}, local size: {}, fusion threshold: {} B)",
               kVersionString, config.run_dir, cores.daemon.empty() ? "not pinned" : FormatCoreList(cores.daemon),
               FormatCoreList(cores.workers), config.local_size ? std::to_string(config.local_size) : "from first client",
               config.fusion_threshold);
  NotifyService("READY=1\nSTATUS=serving " + config.run_dir + "\nSYNCD_WORKER_CORES=" + FormatCoreList(cores.workers) +
                "\nSYNCD_DAEMON_CORES=" + FormatCoreList(cores.daemon) + "\nMAINPID=" + std::to_string(getpid()));
}

// A job that starts before any rank attaches: the one a restarted daemon resumes, or this node's
// when every slot of it is vacant (--vacant-ranks, --job-id).
void StartJobBeforeRanks(const Config& config, const JobLinks& job, Engine* engine) {
  const bool resume = job.rejoin.job != 0;
  if (!resume && !NodeStartsVacant(config)) return;
  const uint64_t id = resume ? job.rejoin.job : config.job_id;
  StatusOr<EngineReply> r = resume ? engine->Ask(ResumeJobCommand{job.rejoin}, 10'000)
                                   : engine->Ask(StartVacantJobCommand{id}, 10'000);
  const Status st = r.ok() ? std::get<Status>(*r) : r.status();
  if (!st.ok())
    spdlog::error("job {:#x}: cannot start it here {}: {}", id,
                  resume ? "(restarted under it)" : "without a rank", st.message());
}

int Serve(const Config& config) {
  sigset_t signals;
  auto cores = SetUpProcess(config, &signals);
  if (!cores.ok()) return Fail(cores.status());
  auto node_page = NodePage::Create();
  if (!node_page.ok()) return Fail(node_page.status());
  JobRegistry jobs;  // --node-service: the jobs it admits clients to
  JobRegistry* registry = config.node_service ? &jobs : nullptr;
  AttachServer attach(config, &*node_page, registry);
  if (Status st = attach.Listen(); !st.ok()) return Fail(st);

  JobLinks job;
  if (Status st = ProbeGpus(config, &job); !st.ok()) return Fail(st);
  if (config.nodes > 1)
    if (Status st = JoinPeers(LinkSpecOf(config), &job); !st.ok()) return Fail(st);
  if (Status st = ConnectGpus(config, &job); !st.ok()) return Fail(st);
  if (job.gpu) {
    for (const std::string& name : job.gpu->stats().names) spdlog::info("GPU {}", name);
  } else {
    spdlog::info("no GPU collectives: {}", job.no_gpu);
  }
  Engine engine(config, &*node_page, config.local_size,
                [&attach](uint32_t client_id) { attach.KickClient(client_id); }, std::move(job.transport));
  engine.AttachGpu(std::move(job.gpu), job.no_gpu);
  attach.set_engine(&engine);
  // Graceful drain (SIGTERM, SIGINT, syncctl drain): no new clients; what is in flight gets the
  // timeout to finish, then fails; the engine stops once nothing is left. Any thread.
  std::once_flag drain_once;
  auto begin_drain = [&](double timeout_s, const std::string& why) {
    std::call_once(drain_once, [&] {
      spdlog::info("draining ({}): no new clients, {:.0f} s for what is in flight", why, timeout_s);
      NotifyService("STOPPING=1\nSTATUS=draining (" + why + ")");
      attach.StopAccepting();
    });
    char limit[32];
    snprintf(limit, sizeof(limit), "%.0f", timeout_s);
    engine.Drain(DrainDeadlineNs(abi::MonotonicNs(), timeout_s),
                 "syncd on node " + std::to_string(config.node_rank) + " stopped (" + why +
                     ") before this collective finished (drain timeout " + limit + " s)");
  };
  ControlService control(config, *cores, &engine, begin_drain, registry);
  std::unique_ptr<MetricsServer> metrics;  // stops (below) before the engine goes
  if (config.metrics_port >= 0) {
    auto m = MetricsServer::Start(config.metrics_address, uint16_t(config.metrics_port),
                                  [&engine] { return MetricFamilies(*engine.FreshSnapshot(100)); });
    if (!m.ok()) return Fail(m.status());
    metrics = std::move(*m);
    control.set_metrics_url(metrics->url());
    if (Status st = WriteMetricsUrl(config.run_dir, metrics->url()); !st.ok()) return Fail(st);
    spdlog::info("metrics at {}", metrics->url());
  }
  auto server = StartControlServer(config.run_dir, &control, config.node_service ? config.admin_group : "");
  if (!server.ok()) return Fail(server.status());

  std::thread engine_thread([&engine] { engine.Run(); });
  StartJobBeforeRanks(config, job, &engine);
  if (job.rendezvous) job.rendezvous->set_rejoin(RejoinHook(&engine, 0));
  control.RestoreJobs();  // a node service restarted under its jobs
  std::thread attach_thread([&attach] { attach.Run(); });
  AnnounceServing(config, *cores);

  WatchUntilFinished(config, engine, *node_page, signals, begin_drain);
  engine_thread.join();
  const Engine::DrainResult drained = engine.drain_result();
  spdlog::info("drained: {} requests finished, {} failed{}", drained.completed, drained.failed,
               drained.deadline_passed ? " at the deadline" : "");
  node_page->SetState(abi::DaemonState::kStopping);
  attach.Stop();
  attach_thread.join();
  (*server)->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  if (job.rendezvous_server) job.rendezvous_server->Shutdown();
  unlink((config.run_dir + "/control.sock").c_str());
  if (metrics) {
    metrics.reset();
    unlink((config.run_dir + "/metrics.url").c_str());
  }
  return 0;
}

}  // namespace
}  // namespace syncd

int main(int argc, char** argv) {
  CLI::App app{"syncd: per-node communication daemon for data-parallel training.\n"
               "Every setting is a flag, or an environment variable; a flag wins."};
  std::map<std::string, std::string> flags;
  std::map<std::string, std::string> values;
  for (const syncd::ConfigEntry& e : syncd::ConfigTable()) {
    app.add_option_function<std::string>(
           "--" + e.name, [&flags, name = e.name](const std::string& v) { flags[name] = v; },
           e.help + " [env " + e.env + ", default " + e.default_text + "]")
        ->type_name("VALUE")
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // wrappers append; the last one wins
  }
  bool markdown = false;
  app.add_flag("--config-markdown", markdown, "Print the configuration table as Markdown and exit");
  app.set_version_flag("--version", syncd::VersionLine("syncd"), "Print the version and the protocols it speaks, and exit");
  CLI11_PARSE(app, argc, argv);
  if (markdown) {
    fputs(syncd::ConfigMarkdownTable().c_str(), stdout);
    return 0;
  }
  auto config = syncd::BuildConfig(flags, syncd::ConfigEnvironment());
  if (!config.ok()) {
    fprintf(stderr, "syncd: %s\n", config.status().message().c_str());
    return 2;
  }
  return syncd::Serve(*config);
}
