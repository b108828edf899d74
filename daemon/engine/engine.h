// The engine: the daemon's one pinned progress thread. It takes clients in and out (the inbox),
// reads every client's submission ring, checks each request and hands it to the job (job.h: its
// process sets, point-to-point, lost ranks, stalls, health), posts completions and appends a
// fixed-size event for each (obs/completion_log.h). What lives for one job is the job's tenant
// (engine/tenant.h: the job, its ranks here, its residuals); what outlives jobs or is shared by
// them (clients, the ledger, the timeline, the transport) is the engine's. A daemon serves one job
// at a time; a node service on one node serves its registered jobs side by side, each client
// bound to its job's tenant. When idle for `spin_us` it sleeps on the node page's doorbell
// (clients and the control plane ring it).
//
// The status and the health reports are built off the engine thread (obs/status_builder.h): the
// engine only captures its facts when asked (a command) and sends the report it is handed. While
// Run() runs, an observer thread folds the completion events, and every report period asks for
// the facts, builds the status and hands the engine this node's health report.
//
// Threads: Run() is the engine thread. Post() and Stop() may be called from any other single
// producer thread (the attach server); Snapshot(), FreshSnapshot(), Ask() from any thread but the
// engine's. Nothing else is shared.
#ifndef SYNCD_DAEMON_ENGINE_ENGINE_H_
#define SYNCD_DAEMON_ENGINE_ENGINE_H_

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <variant>

#include "daemon/base/config.h"
#include "proto/mutex.h"
#include "daemon/base/spsc_queue.h"
#include "daemon/engine/job.h"
#include "daemon/engine/job_timeline.h"
#include "daemon/core/link_pacer.h"
#include "daemon/core/request_ledger.h"
#include "daemon/core/request_pool.h"
#include "daemon/engine/commands.h"
#include "daemon/engine/core_contention.h"
#include "daemon/engine/engine_drain.h"
#include "daemon/engine/engine_links.h"
#include "daemon/engine/observer_thread.h"
#include "daemon/engine/process_set.h"
#include "daemon/engine/tenant.h"
#include "daemon/exec/gpu_executor.h"
#include "daemon/obs/completion_log.h"
#include "daemon/obs/status_builder.h"
#include "daemon/transport/transport.h"
#include "daemon/shm/client_segment.h"
#include "daemon/shm/node_page.h"

namespace syncd {

struct AttachedClient {
  uint32_t client_id = 0;
  uint32_t rank = 0, local_rank = 0, local_size = 0;
  int32_t pid = 0;
  uint64_t job_id = 0;  // 0: unspecified
  uint32_t weight = 1;  // its job's share against other jobs (a node service's registration)
  bool shares_engine_core = false;  // the rank may run on a core the engine may run on
  ClientSegment segment;
};

// Control plane -> engine.
struct ClientAttachedEvent { std::unique_ptr<AttachedClient> client; };
struct ClientLostEvent {
  uint32_t client_id;
  std::string reason;
  bool clean = false;  // detached with syncd_shutdown rather than died
};
using EngineEvent = std::variant<ClientAttachedEvent, ClientLostEvent>;

class Engine {
 public:
  // `kick_client` is called on the engine thread when a client broke the protocol and must be
  // disconnected; it must not block.
  // `local_size` may be 0: the first attached client then fixes it.
  // `transport` connects the job's daemons (nullptr for a one-node job).
  Engine(const Config& config, const NodePage* node_page, uint32_t local_size,
         std::function<void(uint32_t client_id)> kick_client, std::unique_ptr<Transport> transport = nullptr);
  ~Engine();

  // Runs until Stop(). Call from the engine thread.
  void Run();
  // One pass over all inputs; returns whether it did any work. Exposed for tests.
  bool Poll();

  // GPU tensors: the executor of this node's GPUs, connected to the job's other GPUs. Before Run().
  // `why_none`: why there is none (for the error a GPU tensor gets).
  void AttachGpu(std::unique_ptr<GpuExecutor> gpu, std::string why_none = "") {
    gpu_ = std::move(gpu);
    if (!why_none.empty()) gpu_unavailable_ = std::move(why_none);
  }
  const GpuExecutor* gpu() const { return gpu_.get(); }

  // From the single producer thread. Takes the event, or returns false and leaves it untouched
  // when the inbox is full (post it again later).
  bool Post(EngineEvent&& event);
  void Stop();
  // Any thread: graceful drain. Run() goes on serving until nothing is in flight, then returns;
  // whatever is still in flight at `deadline_ns` fails with `why` ("the daemon is draining ...").
  // A later call may only bring the deadline forward.
  void Drain(uint64_t deadline_ns, const std::string& why);
  bool draining() const { return drain_.on(); }
  // Whether Run() has returned; what the drain let finish and what it failed.
  bool finished() const { return drain_.finished(); }
  using DrainResult = EngineDrain::Result;
  DrainResult drain_result() const { return drain_.result(); }  // once finished()

  // The latest status built: at most a report period old while the engine runs (FreshSnapshot
  // builds one now).
  std::shared_ptr<const StatusSnapshot> Snapshot() const { return builder_.Latest(); }
  // Asks the engine for its facts, waiting up to `timeout_ms` for them (never blocks the engine),
  // and builds the status on this thread; falls back to the latest one.
  std::shared_ptr<const StatusSnapshot> FreshSnapshot(int timeout_ms) const;

  // A command (engine/commands.h) from any thread but the engine's: the engine carries it out
  // between two polls; waits up to `timeout_ms` for its reply (TIMEOUT: none came in time; the
  // engine may still carry it out, and its reply is dropped then).
  StatusOr<EngineReply> Ask(EngineCommand command, int timeout_ms) const;
  // The job's timeline (engine/job_timeline.h): Ask with a TimelineCommand.
  Status CommandTimeline(const TimelineCommand& command, int timeout_ms);

 private:
  // Jobs side by side: each one's share of a pass of the engine (`ns` spent on `t`), and at the
  // pass's end the wait the others caused each job that had work in flight.
  void Charge(Tenant& t, uint64_t ns) { t.pass_ns += ns; }
  void SettleShares();
  // Whether any attached rank may run where the engine runs (unpinned, or a shared core).
  bool RanksShareEngineCore() const;
  // Whether a cycle waiting on other nodes sleeps on the network (--network-wait, or auto and a
  // contended core) rather than polls.
  bool SleepsOnNetwork() const;
  void SayContention() const;
  // StatusReply.engine_wait: how the idle engine waits, and why.
  std::string EngineWait() const;
  // Counts the other syncd daemons that may run on this one's cores (CoreContention).
  void CountOtherDaemons();
  // Sleeps on the doorbell (with `network`, the transport's descriptors too); see engine.cc.
  bool Sleep(uint64_t timeout_ns, bool network);
  // Run's turn that did nothing: sleep, nap on the network, yield or pause.
  void Idle(uint64_t now, uint64_t since_work, uint64_t spin_ns);
  struct ClientState {
    std::unique_ptr<AttachedClient> info;
    uint64_t ops = 0, bytes = 0, errors = 0;
    uint64_t last_submit_ns = 0;  // when the engine last took an entry off its ring
    std::string broke;  // how it broke the ring protocol (DrainSubmissions returned false)
    // A GPU request whose client's interprocess event has not fired (GpuExecutor::Signalled):
    // taken once it has; the client's later entries wait on its ring behind it.
    std::optional<Request> held;
    Tenant* tenant = nullptr;  // the job it runs
  };
  // The tenant a client attaching joins: the job it runs (a node service serving jobs side by
  // side: its job's own), begun afresh when its first rank attaches (none of the previous job's
  // is left, or this node's local size changed).
  Tenant& TenantFor(const AttachedClient& client);
  // EndJob: drops what the job left, tells the other nodes and forgets the tenant (DropTenant:
  // its sets retired, its residuals counted as dropped).
  void EndJob(Tenant& t, uint64_t next_job);
  void DropTenant(Tenant& t);
  // Jobs side by side slice their large host allreduces (EngineShare); a job alone runs at once.
  void ShareEngine();
  // Whether a rank of a job other than `mine` has a submission on its ring.
  bool OthersSubmitted(const Tenant* mine) const;
  // BeginJob: the job's global process set, its coordination afresh on many nodes. `resume`: a
  // daemon restarted under job `job` starts it where node 0 has it.
  Tenant& BeginJob(uint64_t job, uint32_t local_size, const JobResume* resume = nullptr);
  // The one tenant of a daemon of one job (null: none yet); a many-node job is always alone.
  Tenant* Only() const { return tenants_.empty() ? nullptr : tenants_.begin()->second.get(); }
  Tenant* TenantOfJob(uint64_t job) const;
  // Its tenant's, of the first request with a client (null: only stand-ins, or gone).
  const Tenant* TenantOf(const std::vector<Request>& requests) const;
  // The job's membership (Job::membership) into its clients' segments when it changed (returns whether
  // it did); a request of a rank that has not acknowledged it is refused (why, or OK).
  bool PublishMembership(Tenant& t);
  // The membership published and the global set's nodes, into every client's segment of the job
  // (abi::JobView, syncd_job_set_ranks), or one client's as it is taken in.
  void PublishSetNodes(const Tenant& t) const;
  void PublishJobTo(const Tenant& t, const ClientSegment& segment) const;
  Status MembershipRefusal(const Tenant& t, const Request& r) const;
  bool HasWork();
  // Whether any job here has other nodes: the daemon's own transport, or a job's own links.
  bool HasNetwork() const { return links_.any(); }
  // Draining: whether the engine may stop now (nothing in flight here, nor, in a many-node job,
  // on any node; see Negotiator::SetDrain).
  bool Drained();
  // The one way work ends, whatever ended it (a refused request, a rank gone, the drain
  // deadline, a new job): every pending request in `scope` completes exactly once with `why`
  // (a request here, the rest in the job: Job::End, which also ends stalled jobs).
  void End(const EndScope& scope, const Status& why);  // in every job served
  void End(Tenant& t, const EndScope& scope, const Status& why);
  bool DrainEvents();
  // False when the client broke the ring protocol; sets *did when it consumed anything.
  bool DrainSubmissions(ClientState& c, bool* did);
  // A checked request, or nullopt once a refused one is completed with its error; for a refused
  // collective, the failure notice (abi::OpKind::kFail) that fails its name on the other ranks.
  std::optional<Request> Validate(ClientState& c, const abi::SubmitEntry& e);
  // A checked request goes to the job (or is answered here: a timeline request).
  void Take(Tenant& t, Request r);
  std::optional<Request> RefusalNotice(const ClientState& c, const abi::SubmitEntry& e, const Status& why);
  // The one place requests complete: the outcomes the calls into the job left (core/outcomes.h),
  // each tensor's requests applied (ApplyOutcome), their storage back to the pool, then every
  // client's ring flushed. After every call into the job, before anything else looks at clients.
  void Settle();
  // One tensor's requests (or one request): the ledger, the counters, the timeline, the clients.
  void ApplyOutcome(const std::vector<Request>& requests, const Status& status);
  void Count(const std::vector<Request>& requests, const Status& status);  // into metrics_
  // A completed tensor into the timeline: each rank's submission and its life on this node.
  void Trace(Timeline* tl, const std::vector<Request>& requests, const Status& status);
  // syncctl timeline: the named job's (0: the daemon's one job).
  Status RunTimelineCommand(const TimelineCommand& c);
  void Complete(const Request& r, const Status& status);
  void Disconnect(uint32_t client_id, const std::string& reason, bool clean = false);
  void FlushClients();
  // The engine's part of the status (obs/status_builder.h), now.
  // Each job's share and place (the status's jobs), and what a job on links of its own reports.
  void CaptureJobs(uint64_t now_ns, EngineFacts* f) const;
  std::shared_ptr<EngineFacts> CaptureFacts() const;
  // Attached and lost ranks, by rank, and whether the others have waited for each (status, metrics).
  std::vector<ClientSnapshot> SnapshotClients(uint64_t now_ns) const;
  // The observer thread's tick (started and stopped by Run): folds the completion events, and
  // every report period (`*next_report`: when the next is due) builds the status and has this
  // node's health report sent.
  void Observe(uint64_t* next_report);
  // The engine thread, once Run's loop ended: the observer stops (its asks answered meanwhile).
  void StopObserver();
  // Once a second: the job's stalls (Job::CheckStalls) and departures.
  void CheckStalls(uint64_t now_ns);

  const Config config_;
  const NodePage* node_page_;
  const uint32_t local_size_;  // --local-size, or 0: each job's first rank says
  // Jobs served side by side (a node service on one node: each registered job its own tenant)
  // or one at a time.
  const bool side_by_side_;
  const std::function<void(uint32_t)> kick_client_;
  EngineLinks links_;  // to other nodes' daemons: the daemon's own job's, and jobs' own
  // A node service's registered jobs' own settings over the daemon's (AdoptJobCommand), by job.
  std::map<uint64_t, std::map<std::string, std::string>> job_settings_;
  std::map<uint64_t, FileOwner> job_owner_;  // a node service's registered jobs' users
  std::unique_ptr<GpuExecutor> gpu_;
  uint32_t held_gpu_ = 0;  // clients holding a request back (ClientState::held): the engine polls
  std::string gpu_unavailable_ = "none was found at startup";
  std::map<uint64_t, std::unique_ptr<Tenant>> tenants_;  // the jobs served, by id (empty until a client attached)
  ResidualStats residuals_gone_;  // what the residual stores of jobs that ended evicted, refused and dropped
  std::vector<std::unique_ptr<ProcessSet>> retired_;  // of ended jobs, until their GPU work is done
  RequestLedger ledger_;  // every request read off a ring until its one completion
  LinkPacer pacer_;  // jobs side by side: their segments onto the network, by weight
  RequestPool request_pool_;  // spent requests' storage, for the next ones read off a ring
  Outcomes outcomes_;  // what the job's sets and transfers ended, until Settle applies it
  ExecutionCounters counters_;
  CompletionLog completions_;  // Count()'s events, folded by the status builder
  mutable StatusBuilder builder_{&completions_};  // off the engine thread (FreshSnapshot, the observer)
  SpscQueue<EngineEvent> inbox_{256};
  std::atomic<bool> stop_{false};
  EngineDrain drain_;
  mutable CommandQueue commands_;  // the control plane's and the observer's commands (Ask)
  void RunCommands();  // commands.cc
  RejoinAnswer TakeNodeBack(const RejoinCommand& c);
  Status ResumeJob(const RejoinAnswer& where);
  Status StartVacantJob(uint64_t job);
  Status RemoveJob(uint64_t job, const std::string& why);
  Status DrainJob(const DrainJobCommand& c);
  ObserverThread observer_;

  std::map<uint32_t, ClientState> clients_;  // by client id (each job's by local rank: Tenant)

  // What the engine's loop counts, for the status (CaptureFacts).
  struct Tally {
    uint64_t start_ns = 0;             // when the engine started
    uint64_t last_stall_check_ns = 0;  // CheckStalls runs once a second
    uint64_t stall_warnings = 0;
    uint64_t error_ops = 0;            // requests refused at submission
    uint64_t busy_ns = 0, wakeups = 0;
    uint64_t work_turns = 0;   // turns of the engine's loop that did work
    uint64_t collectives = 0;  // collectives completed with a rank of this node in them
    uint64_t client_wakes = 0;  // futex wakes of clients asleep on their doorbells
  };
  Tally tally_;
  // Whether the engine's core is its own (measured; --network-wait auto): it spins and polls
  // where it is, sleeps at once where its core is contended.
  CoreContention contention_;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_ENGINE_ENGINE_H_
