// The engine: the daemon's one pinned progress thread. It polls every client's submission ring,
// matches tensors across ranks, executes ready collectives and posts completions. When idle for
// `spin_us` it sleeps on the node page's doorbell (clients and the control plane ring it).
//
// Threads: Run() is the engine thread. Post() and Stop() may be called from any other single
// producer thread (the attach server); Snapshot() from any thread. Nothing else is shared.
#ifndef SYNCD_DAEMON_ENGINE_ENGINE_H_
#define SYNCD_DAEMON_ENGINE_ENGINE_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <variant>

#include "daemon/base/config.h"
#include "daemon/base/spsc_queue.h"
#include "daemon/collectives/agreement.h"
#include "daemon/collectives/collective.h"
#include "daemon/coord/negotiator.h"
#include "daemon/coord/topo_runner.h"
#include "daemon/core/tensor_table.h"
#include "daemon/plan/fusion.h"
#include "daemon/transport/host_buffer.h"
#include "daemon/transport/transport.h"
#include "daemon/exec/gpu_executor.h"
#include "daemon/exec/host_executor.h"
#include "daemon/obs/status_snapshot.h"
#include "daemon/shm/client_segment.h"
#include "daemon/shm/node_page.h"

namespace syncd {

struct AttachedClient {
  uint32_t client_id = 0;
  uint32_t rank = 0, local_rank = 0, local_size = 0;
  int32_t pid = 0;
  uint64_t job_id = 0;  // 0: unspecified
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
  bool draining() const { return drain_deadline_ns_.load(std::memory_order_acquire) != 0; }
  // Whether Run() has returned; what the drain let finish and what it failed.
  bool finished() const { return finished_.load(std::memory_order_acquire); }
  struct DrainResult {
    uint64_t completed = 0, failed = 0;
    bool deadline_passed = false;
  };
  DrainResult drain_result() const { return drain_result_; }  // once finished()

  std::shared_ptr<const StatusSnapshot> Snapshot() const {
    std::lock_guard lock(snapshot_mu_);
    return snapshot_;
  }
  // Asks the engine for a new snapshot and waits up to `timeout_ms` for it (never blocks the
  // engine); falls back to the latest one. Any thread but the engine's.
  std::shared_ptr<const StatusSnapshot> FreshSnapshot(int timeout_ms) const;

 private:
  struct ClientState {
    std::unique_ptr<AttachedClient> info;
    uint64_t ops = 0, bytes = 0, errors = 0;
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

  // Many nodes: the coordination of job `job` (a transport epoch of its own).
  std::unique_ptr<Negotiator> MakeNegotiator(uint64_t job);
  // The first client of a job attached (none of the previous job's is left): drops what the
  // previous job left and, on many nodes, starts the job's coordination afresh.
  void StartJob(uint64_t job);
  bool HasWork();
  // Requests this daemon holds outside the negotiator (waiting for local ranks, TOPO, GPU).
  size_t InFlight() const;
  // Draining: whether the engine may stop now (nothing in flight here, nor, in a many-node job,
  // on any node; see Negotiator::SetDrain).
  bool Drained();
  // The drain deadline passed: fails everything still in flight with the drain's reason.
  void FailInFlight(const Status& why);
  // Why new requests must fail now (every lost rank of this job, first loss first), or "".
  std::string BlockingLosses() const;
  bool DrainEvents();
  // False when the client broke the ring protocol; sets *did when it consumed anything.
  bool DrainSubmissions(ClientState& c, bool* did);
  std::optional<Request> Validate(ClientState& c, const abi::SubmitEntry& e);
  // The fused groups of `ready`, by the rules of each tensor's kind.
  std::vector<FusionGroup> Fuse(const std::vector<ReadyTensor>& ready) const;
  static CollectiveGroup Members(const std::vector<ReadyTensor>& ready, const FusionGroup& g);
  void Execute(std::vector<ReadyTensor>& ready);
  // Many nodes: runs the tensors every node agreed on, hierarchically (local reduce, inter-node
  // collective, scatter back). `tag` is unique to this execution across the job. Completes each
  // tensor's requests as its group finishes and clears them (see Negotiator::Execute).
  // `buffer`: the fusion buffer of this kind of execution (negotiated and TOPO groups may be in
  // flight at once, each needs its own). `gpu_position`: under --coord topo, where a negotiated
  // cycle's GPU groups go among the plan's GPU groups (Negotiator::agreed_gpu_position);
  // nullopt for a TOPO plan group.
  CommTask ExecuteAgreed(std::vector<ReadyTensor>* ready, uint64_t tag, HostBuffer* buffer,
                         std::optional<uint64_t> gpu_position);
  // One GPU group of ExecuteAgreed: waits for its turn (--coord topo), enqueues it, waits for it.
  CommTask RunAgreedOnGpu(std::vector<ReadyTensor>* agreed, FusionGroup g, std::optional<uint64_t> gpu_position);
  // One node, TOPO: runs a plan group at once (the task is done when it returns).
  CommTask ExecuteLocal(std::vector<ReadyTensor>* ready, uint64_t tag);
  // A TOPO graph every rank of the job registered, agreed at this point of the job on every
  // node: installs its plan (under --coord topo) and completes the registrations.
  void RegisterPlan(ReadyTensor& registration);
  // Hands a tensor every local rank submitted to the TOPO runner, the negotiator or the executor.
  // An error means the job must fail (the tensor's requests were failed already).
  Status Route(ReadyTensor t, std::vector<ReadyTensor>* local_ready);
  // The job cannot go on (a plan violation, a failed TOPO group): fails everything in flight.
  void FailJob(const Status& why);
  void CountExecuted(const std::vector<ReadyTensor>& ready, const FusionGroup& g);
  // One node: enqueues group `g` (GPU tensors) on the GPU executor; its requests move into
  // gpu_ops_ and complete when the GPUs are done (PollGpu), or fail now.
  void ExecuteGpu(std::vector<ReadyTensor>& ready, const FusionGroup& g);
  // Enqueues a GPU group (its kind's GPU path); a ticket for GpuExecutor::Test.
  StatusOr<uint64_t> EnqueueGpu(std::vector<ReadyTensor>& ready, const FusionGroup& g);
  bool PollGpu();
  void CompleteAll(const std::vector<Request>& requests, const Status& status);
  void Complete(const Request& r, const Status& status);
  void Disconnect(uint32_t client_id, const std::string& reason, bool clean = false);
  void FlushClients();
  void PublishSnapshot();
  // Tensors that some ranks submitted and others have not for at least `min_age_ns`: this node's
  // ranks, and (on node 0) whole nodes the coordinator still waits for; oldest first.
  std::vector<StallSnapshot> Stalls(uint64_t now_ns, uint64_t min_age_ns) const;
  // Once a second: logs stalls past --stall-warning-s (once per period, as Horovod's stall
  // inspector does) and shuts the job down when one passes --stall-shutdown-s.
  void CheckStalls(uint64_t now_ns);
  // Fails everything the job has pending, on every node, naming the stalls (oldest first).
  void ShutDownStalledJob(const std::vector<StallSnapshot>& stalls);
  // Fails what waits for ranks that detached cleanly and did not attach again in time.
  void ExpireDepartures(uint64_t now_ns);

  const Config config_;
  const NodePage* node_page_;
  uint32_t local_size_;
  uint32_t world_size_;
  const std::function<void(uint32_t)> kick_client_;
  TensorTable table_;
  HostExecutor executor_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<GpuExecutor> gpu_;
  struct GpuOp {
    uint64_t ticket;
    std::vector<std::vector<Request>> requests;  // by member tensor
  };
  std::vector<GpuOp> gpu_ops_;  // one-node GPU groups in flight
  std::string gpu_unavailable_ = "none was found at startup";
  // --coord topo on many nodes: one order of plan and negotiated GPU collectives on every node.
  GpuOrder gpu_order_;
  std::unique_ptr<Negotiator> negotiator_;  // many nodes: the current job's; none before the first
  std::unique_ptr<TopoRunner> topo_;              // --coord topo, once a plan is registered
  std::shared_ptr<const TopoPlan> plan_;          // the job's registered plan (any mode)
  Status job_failure_;                            // one-node jobs: why FailJob was called
  Status deferred_failure_;                       // found inside a negotiation cycle
  uint64_t fallback_tensors_ = 0;                 // names outside the plan while one was in use
  // Fusion buffers: negotiated groups and TOPO groups may be in flight at once.
  HostBuffer fusion_buffer_;
  HostBuffer topo_fusion_buffer_;
  SpscQueue<EngineEvent> inbox_{256};
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> drain_deadline_ns_{0};  // 0: not draining
  std::atomic<bool> finished_{false};
  mutable std::mutex drain_mu_;
  std::string drain_why_;          // under drain_mu_
  std::string drain_leave_why_;    // engine thread: the reason the deadline failed requests with
  uint64_t drain_first_cycle_ = 0;  // engine thread: the first negotiation cycle of the drain
  DrainResult drain_result_;       // engine thread until finished_, then read-only
  // The latest snapshot. A mutex held for a pointer copy (every 20 ms by the engine, now and then
  // by the control service), not std::atomic<shared_ptr>: libstdc++ 12 implements that with a
  // lock bit ThreadSanitizer cannot see under clang.
  mutable std::mutex snapshot_mu_;
  std::shared_ptr<const StatusSnapshot> snapshot_;  // GUARDED_BY(snapshot_mu_)
  mutable std::atomic<uint64_t> snapshot_requested_{0};
  std::atomic<uint64_t> snapshot_published_{0};

  std::map<uint32_t, ClientState> clients_;          // by client id
  std::map<uint32_t, uint32_t> client_by_local_rank_;  // local rank -> client id
  std::map<uint32_t, LostRank> lost_ranks_;          // local rank -> why it is gone

  uint64_t start_ns_ = 0;
  uint64_t last_stall_check_ns_ = 0;
  uint64_t loss_seq_ = 0;
  uint64_t job_id_ = 0;  // the job being served (0: unspecified by its clients)
  bool job_started_ = false;  // a client has attached since the daemon started
  std::map<std::string, StatusSnapshot::KindCount> by_kind_;
  uint64_t error_ops_ = 0, fused_ops_ = 0, fused_tensors_ = 0;
  uint64_t busy_ns_ = 0, wakeups_ = 0;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_ENGINE_ENGINE_H_
