// The engine: the daemon's one pinned progress thread. It takes clients in and out (the inbox),
// reads every client's submission ring, checks each request and hands it to its process set
// (process_set.h: matching, coordination, execution), posts completions, watches for stalls and
// publishes the status. When idle for `spin_us` it sleeps on the node page's doorbell (clients
// and the control plane ring it).
//
// Threads: Run() is the engine thread. Post() and Stop() may be called from any other single
// producer thread (the attach server); Snapshot() from any thread. Nothing else is shared.
#ifndef SYNCD_DAEMON_ENGINE_ENGINE_H_
#define SYNCD_DAEMON_ENGINE_ENGINE_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <variant>

#include "daemon/base/config.h"
#include "proto/mutex.h"
#include "daemon/base/spsc_queue.h"
#include "daemon/engine/job_timeline.h"
#include "daemon/engine/point_to_point.h"
#include "daemon/core/request_ledger.h"
#include "daemon/core/request_pool.h"
#include "daemon/engine/commands.h"
#include "daemon/engine/process_set.h"
#include "daemon/exec/gpu_executor.h"
#include "daemon/obs/status_snapshot.h"
#include "daemon/transport/transport.h"
#include "daemon/shm/client_segment.h"
#include "daemon/shm/node_page.h"

namespace syncd {

struct AttachedClient {
  uint32_t client_id = 0;
  uint32_t rank = 0, local_rank = 0, local_size = 0;
  int32_t pid = 0;
  uint64_t job_id = 0;  // 0: unspecified
  bool shares_engine_core = false;  // the rank may run on a core the engine may run on
  ClientSegment segment;
};

// What Engine::End ends: one request, what a gone rank leaves behind, a process set, or the job.
struct EndScope {
  enum class Kind { kRequest, kClient, kProcessSet, kJob };
  Kind kind = Kind::kJob;
  const Request* request = nullptr;  // kRequest
  uint32_t local_rank = 0;           // kClient: the rank that is gone
  int32_t set = 0;                   // kProcessSet
  // kClient, kProcessSet, kJob: how far it reaches (ProcessSet::Reach; kClient: kRank).
  ProcessSet::Reach reach = ProcessSet::Reach::kJob;
  Status peers_why;  // what the other nodes are told (kRank: OK means nothing; kJob: OK means `why`)

  static EndScope OneRequest(const Request& r) {
    EndScope s;
    s.kind = Kind::kRequest;
    s.request = &r;
    return s;
  }
  static EndScope Client(uint32_t local_rank, Status peers_why) {
    EndScope s;
    s.kind = Kind::kClient;
    s.local_rank = local_rank;
    s.reach = ProcessSet::Reach::kRank;
    s.peers_why = std::move(peers_why);
    return s;
  }
  static EndScope Set(int32_t id, ProcessSet::Reach reach) {
    EndScope s;
    s.kind = Kind::kProcessSet;
    s.set = id;
    s.reach = reach;
    return s;
  }
  static EndScope Job(ProcessSet::Reach reach) {
    EndScope s;
    s.reach = reach;
    return s;
  }
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
  bool draining() const { return drain_deadline_ns_.load(std::memory_order_acquire) != 0; }
  // Whether Run() has returned; what the drain let finish and what it failed.
  bool finished() const { return finished_.load(std::memory_order_acquire); }
  struct DrainResult {
    uint64_t completed = 0, failed = 0;
    bool deadline_passed = false;
  };
  DrainResult drain_result() const { return drain_result_; }  // once finished()

  std::shared_ptr<const StatusSnapshot> Snapshot() const {
    MutexLock lock(&snapshot_mu_);
    return snapshot_;
  }
  // Asks the engine for a new snapshot and waits up to `timeout_ms` for it (never blocks the
  // engine); falls back to the latest one. Any thread but the engine's.
  std::shared_ptr<const StatusSnapshot> FreshSnapshot(int timeout_ms) const;

  // A command (engine/commands.h) from any thread but the engine's: the engine carries it out
  // between two polls; waits up to `timeout_ms` for its reply (TIMEOUT: none came in time; the
  // engine may still carry it out, and its reply is dropped then).
  StatusOr<EngineReply> Ask(EngineCommand command, int timeout_ms) const;
  // The job's timeline (engine/job_timeline.h): Ask with a TimelineCommand.
  Status CommandTimeline(const TimelineCommand& command, int timeout_ms);

 private:
  // Whether any attached rank may run where the engine runs (unpinned, or a shared core).
  bool RanksShareEngineCore() const;
  // Run's turn that did nothing: sleep, nap on the network, yield or pause.
  void Idle(uint64_t now, uint64_t since_work, uint64_t spin_ns);
  struct ClientState {
    std::unique_ptr<AttachedClient> info;
    uint64_t ops = 0, bytes = 0, errors = 0;
    uint64_t last_submit_ns = 0;  // when the engine last took an entry off its ring
    std::string broke;  // how it broke the ring protocol (DrainSubmissions returned false)
  };
  struct LostRank {
    int32_t pid;
    std::string reason;
    bool blocking;  // new requests fail at once; cleared when the job's last client leaves
    uint64_t seq;   // order of loss
    // A rank that detached between collectives may attach again (hvd.shutdown(), then init()):
    // until this deadline requests that need it wait; 0 when not waiting for it.
    uint64_t rejoin_deadline_ns = 0;
  };

  // The first client of a job attached (none of the previous job's is left). EndJob: drops
  // what the previous job left and tells the other nodes. BeginJob: the job's global process set,
  // its coordination afresh on many nodes.
  void EndJob(uint64_t next_job);
  void BeginJob(uint64_t job);
  // The set a request belongs to, or nullptr.
  ProcessSet* SetOf(const Request& r);
  // Process set changes the global set agreed (ProcessSetHooks::change_sets), applied in the
  // order agreed once the sets are polled: every node makes the same ones at the same point.
  void ApplySetChanges();
  Status AddSet(const std::vector<int64_t>& ranks);
  Status RemoveSet(int32_t id);
  // The ranks of set `id` a request names (nullptr: not a set of this job).
  const std::vector<uint32_t>* SetRanksOf(int32_t id) const;
  bool HasWork();
  // Requests this daemon holds outside the negotiator (waiting for local ranks, TOPO, GPU).
  size_t InFlight() const;
  // Draining: whether the engine may stop now (nothing in flight here, nor, in a many-node job,
  // on any node; see Negotiator::SetDrain).
  bool Drained();
  // The one way work ends, whatever ended it (a refused request, a rank gone, a stall, the drain
  // deadline, a new job): every pending request in `scope` completes exactly once with `why`.
  // Returns how many tensors were waiting for local ranks.
  size_t End(const EndScope& scope, const Status& why);
  // Why new requests must fail now (every lost rank of this job, first loss first), or "".
  std::string BlockingLosses() const;
  bool DrainEvents();
  // False when the client broke the ring protocol; sets *did when it consumed anything.
  bool DrainSubmissions(ClientState& c, bool* did);
  // A checked request, or nullopt once a refused one is completed with its error; for a refused
  // collective, the failure notice (abi::OpKind::kFail) that fails its name on the other ranks.
  std::optional<Request> Validate(ClientState& c, const abi::SubmitEntry& e);
  std::optional<Request> RefusalNotice(const ClientState& c, const abi::SubmitEntry& e, const Status& why);
  void CompleteAll(const std::vector<Request>& requests, const Status& status);
  // Completes what point-to-point ended (it completes nothing itself): after every call into it.
  void CompleteTransfers();
  void Count(const std::vector<Request>& requests, const Status& status);  // into metrics_
  // A completed tensor into the timeline: each rank's submission and its life on this node.
  void Trace(const std::vector<Request>& requests, const Status& status);
  void Complete(const Request& r, const Status& status);
  void Disconnect(uint32_t client_id, const std::string& reason, bool clean = false);
  void FlushClients();
  void PublishSnapshot();
  // Attached and lost ranks, by rank, with whether each holds the others up (status, metrics).
  std::vector<ClientSnapshot> SnapshotClients(uint64_t now_ns) const;
  // The job-wide health view (health.cc, coord/job_health.h): this node's report; the view reset
  // for a new job; a report chunk from another node; this node's report sent when due; every
  // node's latest, this one's included.
  NodeHealth LocalHealth(const std::vector<ClientSnapshot>& clients, const std::vector<StragglerRank>& stragglers) const;
  void StartJobHealth(uint64_t now_ns);
  void ReceiveHealth(uint32_t from, const ControlMessage& m);
  void SendHealth(uint64_t now_ns);
  std::vector<NodeHealth> JobNodes(uint64_t now_ns, const std::vector<ClientSnapshot>& clients,
                                   const std::vector<StragglerRank>& stragglers) const;
  // Every set's stalls (ProcessSet::Stalls) and, with `transfers`, sends and receives waiting as
  // long (PointToPoint::Waits), oldest first.
  std::vector<StallSnapshot> Stalls(uint64_t now_ns, uint64_t min_age_ns, bool transfers = true) const;
  // Once a second: logs stalls past --stall-warning-s (once per period, as Horovod's stall
  // inspector does) and shuts the job down when one passes --stall-shutdown-s.
  void CheckStalls(uint64_t now_ns);
  // Fails everything the job has pending, on every node, naming the stalls (oldest first).
  void ShutDownStalledJob(const std::vector<StallSnapshot>& stalls);
  // A stall in words, with how long each missing rank of this node has not called syncd.
  std::string DescribeStall(const StallSnapshot& s, uint64_t now_ns) const;
  // Fails what waits for ranks that detached cleanly and did not attach again in time.
  void ExpireDepartures(uint64_t now_ns);

  const Config config_;
  const NodePage* node_page_;
  uint32_t local_size_;
  uint32_t world_size_;
  const std::function<void(uint32_t)> kick_client_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<GpuExecutor> gpu_;
  std::string gpu_unavailable_ = "none was found at startup";
  // Every process set of the job, whether this node holds ranks of it or not: its ranks, the tag
  // slot its messages carry, and (a member spanning nodes) its view of the transport.
  struct SetInfo {
    std::vector<uint32_t> ranks;
    uint32_t slot = 0;
    std::unique_ptr<Transport> comm;
  };
  std::map<int32_t, SetInfo> set_info_;
  int32_t last_set_id_ = 0;
  uint32_t last_slot_ = 0;
  std::vector<ReadyTensor> set_changes_;
  ProcessSetHooks set_hooks_;  // what every set of the job runs with
  // The job's process sets this node holds ranks of, by id; the global one (0) from the first
  // job on. Declared after set_info_: a set goes before the transport view it runs on.
  std::map<int32_t, std::unique_ptr<ProcessSet>> sets_;
  std::vector<std::unique_ptr<ProcessSet>> retired_;  // of ended jobs, until their GPU work is done
  PointToPoint p2p_;  // send and recv: outside the sets' coordination
  RequestLedger ledger_;  // every request read off a ring until its one completion
  RequestPool request_pool_;  // spent requests' storage, for the next ones read off a ring
  ExecutionCounters counters_;
  CollectiveMetricsByKind metrics_;
  StragglerWindow stragglers_;
  JobHealth health_;
  JobTimeline timeline_;
  std::string host_;  // this machine's name, for the health view
  std::vector<std::pair<uint32_t, uint64_t>> arrivals_;  // Count()'s scratch
  uint64_t stall_warnings_ = 0;
  SpscQueue<EngineEvent> inbox_{256};
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> drain_deadline_ns_{0};  // 0: not draining
  std::atomic<bool> finished_{false};
  mutable Mutex drain_mu_;
  std::string drain_why_ SYNCD_GUARDED_BY(drain_mu_);
  std::string drain_leave_why_;    // engine thread: the reason the deadline failed requests with
  DrainResult drain_result_;       // engine thread until finished_, then read-only
  // The latest snapshot. A mutex held for a pointer copy (every 20 ms by the engine, now and then
  // by the control service), not std::atomic<shared_ptr>: libstdc++ 12 implements that with a
  // lock bit ThreadSanitizer cannot see under clang.
  mutable Mutex snapshot_mu_;
  std::shared_ptr<const StatusSnapshot> snapshot_ SYNCD_GUARDED_BY(snapshot_mu_);
  mutable CommandQueue commands_;  // the control plane's commands (Ask)
  void RunCommands();

  std::map<uint32_t, ClientState> clients_;          // by client id
  std::map<uint32_t, uint32_t> client_by_local_rank_;  // local rank -> client id
  std::map<uint32_t, LostRank> lost_ranks_;          // local rank -> why it is gone

  uint64_t start_ns_ = 0;
  uint64_t last_stall_check_ns_ = 0;
  uint64_t loss_seq_ = 0;
  uint64_t job_id_ = 0;  // the job being served (0: unspecified by its clients)
  bool job_started_ = false;  // a client has attached since the daemon started
  uint64_t error_ops_ = 0;
  uint64_t busy_ns_ = 0, wakeups_ = 0;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_ENGINE_ENGINE_H_
