// The control plane's commands to the engine: typed, from any thread, each with its reply,
// carried out on the engine thread between two polls (Engine::Ask). One queue replaces what each
// command used to have of its own (the timeline's mutex and sleep-poll for its answer, the
// snapshot's request counter). Clients attaching and leaving keep the attach server's bounded
// SPSC inbox (Engine::Post): its back-pressure is what paces a storm of connections.
//
// Threads: Post from any thread; pending and TakeAll from the engine thread.
#ifndef SYNCD_DAEMON_ENGINE_COMMANDS_H_
#define SYNCD_DAEMON_ENGINE_COMMANDS_H_

#include <atomic>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "daemon/base/status.h"
#include "daemon/engine/job.h"
#include "daemon/obs/status_builder.h"
#include "proto/mutex.h"

namespace syncd {

// Capture the engine's part of the status now; the reply is those facts (the status builder,
// obs/status_builder.h, completes them on the asking thread).
struct FactsCommand {};
// Send this node's health report (built off the engine thread) to the job's other nodes, if job
// `job` still runs here.
struct SendHealthCommand {
  uint64_t job = 0;
  NodeHealth mine;
};
// Start (`path` non-empty: node 0 writes it; `seconds`, `cycles`: limits, 0 none) or stop the
// job's timeline (engine/job_timeline.h); the reply is a Status.
struct TimelineCommand {
  uint64_t job = 0;  // 0: the one job the daemon runs (refused while it runs several)
  bool start = true;
  std::string path;
  double seconds = 0;
  uint64_t cycles = 0;
};
// Node 0 of a many-node job: node `node`'s daemon was restarted and joins again (the rendezvous
// asks): reach it at `address` and take the node back into the job that goes on. Reply: RejoinAnswer.
struct RejoinCommand {
  uint64_t job = 0;  // a node service's job on links of its own (0: the daemon's own job)
  uint32_t node = 0;
  std::string address;
  int32_t pid = 0;
  std::string host;           // its machine
  int32_t same_host_pid = 0;  // its pid when it runs on this host, else 0
};
struct RejoinAnswer {
  Status status;
  uint64_t job = 0;  // 0: no job goes on (the new daemon starts as at the first rendezvous)
  uint32_t local_size = 0;
  JobResume resume;
};
// A restarted daemon: start job `where.job` where node 0 has it (RejoinAnswer), on the daemon's
// links or, a node service's job, on its own. Reply: a Status.
struct ResumeJobCommand {
  RejoinAnswer where;
};
// A node whose every rank is vacant (--vacant-ranks, --job-id): start job `job` before any rank
// attaches, standing in for each of them. Reply: a Status.
struct StartVacantJobCommand {
  uint64_t job = 0;
};
// A node service's job `job` was removed (syncctl job remove, the epilog): if it runs here, what
// it has in flight fails with `why` and its ranks are disconnected. Reply: a Status whose text
// says how many ranks were attached.
struct RemoveJobCommand {
  uint64_t job = 0;
  std::string why;
};
// A draining job (syncctl job drain) removed as RemoveJobCommand removes it, once it has nothing in
// flight, or at once with `force` (its deadline passed); SYNCD_IN_PROGRESS while it has work.
struct DrainJobCommand {
  uint64_t job = 0;
  bool force = false;
  std::string why;
};
// A node service's job `job` of several nodes: its links to the other nodes' daemons, made when
// it was registered on every node (control/job_links.h). The engine keeps them from run to run of
// the job until it is removed; its tenant runs on them. Reply: a Status.
struct AdoptJobCommand {
  uint64_t job = 0;
  std::shared_ptr<Transport> transport;  // null: it runs on this node alone
  uint32_t nodes = 1, node_rank = 0;
  std::map<std::string, std::string> settings;  // its own over the daemon's (JobConfig)
  FileOwner owner;  // its user: what the daemon writes for it (its timeline) is written as theirs
};
using EngineCommand = std::variant<FactsCommand, TimelineCommand, SendHealthCommand, RejoinCommand, ResumeJobCommand,
                                   StartVacantJobCommand, RemoveJobCommand, DrainJobCommand, AdoptJobCommand>;
using EngineReply = std::variant<Status, std::shared_ptr<EngineFacts>, RejoinAnswer>;

class CommandQueue {
 public:
  struct Entry {
    EngineCommand command;
    std::promise<EngineReply> reply;
  };

  // Queues `command`; its reply arrives through the future once the engine carried it out.
  std::future<EngineReply> Post(EngineCommand command) {
    Entry e{std::move(command), {}};
    std::future<EngineReply> reply = e.reply.get_future();
    MutexLock lock(&mu_);
    entries_.push_back(std::move(e));
    pending_.store(true, std::memory_order_release);
    return reply;
  }
  // Whether anything waits (one atomic load: the engine checks it every turn).
  bool pending() const { return pending_.load(std::memory_order_acquire); }
  std::vector<Entry> TakeAll() {
    MutexLock lock(&mu_);
    pending_.store(false, std::memory_order_release);
    return std::exchange(entries_, {});
  }

 private:
  Mutex mu_;
  std::vector<Entry> entries_ SYNCD_GUARDED_BY(mu_);
  std::atomic<bool> pending_{false};
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_ENGINE_COMMANDS_H_
