// Node 0's timeline file: the Chrome trace event format (a JSON array; it opens in Perfetto's UI
// and chrome://tracing), one file for the whole job. Every node's chunks (core/timeline.h) come
// here, its own from its engine thread, the others' as node 0's engine receives them; a thread of
// its own formats and writes them, so the engine never formats or touches the disk.
//
// Layout: a process per node ("node N"), a thread per rank ("rank R": its submissions) and per
// daemon stage and process set ("coordination", "execution", "network slot K", "gpu", "partial");
// each tensor's life on a node is an async slice named after it, with its phases nested
// (WAIT_FOR_RANKS, NEGOTIATE, QUEUE, EXECUTE). Times are node 0's clock: each node's events are
// shifted by its clock offset (SetClock), in microseconds since the timeline started.
//
// Bounded: at most kQueueChunks chunks wait for the thread (Push refuses more) and the file stops
// growing at `max_bytes` (a marker says so); what was cut is counted.
//
// Threads: Open, Push, SetClock, SetHost, Finish and the destructor from one thread (the engine's);
// the writer thread does the rest.
#ifndef SYNCD_DAEMON_OBS_TIMELINE_WRITER_H_
#define SYNCD_DAEMON_OBS_TIMELINE_WRITER_H_

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <variant>
#include <vector>

#include "daemon/base/spsc_queue.h"
#include "daemon/base/status.h"
#include "daemon/core/timeline.h"

namespace syncd {

// The job's timeline as a daemon sees it (status).
struct TimelineState {
  bool on = false;
  std::string path;                 // node 0's file
  uint64_t events = 0, dropped = 0; // recorded here, and lost here (a full queue)
  uint64_t written = 0, bytes = 0, cut = 0;  // node 0: events and bytes in the file, cut by the cap
  std::vector<std::pair<double, double>> clocks;  // node 0: per node, offset and error bound (us)
};

// A node service's job: the user its timeline is written for. The daemon (root, or its own
// user) writes the file only where that user could, as theirs: into a directory the user owns,
// a new file or one of the user's own (never through a symbolic link), handed to the user.
struct FileOwner {
  uint32_t uid = 0;
  std::optional<uint32_t> gid;  // the registration's group, or the file stays in the daemon's
};

class TimelineWriter {
 public:
  static constexpr size_t kQueueChunks = 256;  // 16 MiB of events

  // Creates `path` (truncating it) and starts the writer thread. `start_ns`: node 0's clock at
  // the start (time 0 in the file). `owner`: a node service's job's user (FileOwner).
  static StatusOr<std::unique_ptr<TimelineWriter>> Open(const std::string& path, uint64_t max_bytes, uint64_t start_ns,
                                                        const std::optional<FileOwner>& owner = std::nullopt);
  ~TimelineWriter();  // Finish(), then waits for the thread to write what is queued

  // A chunk of node chunk->header().node; false: the queue is full (the chunk is dropped).
  bool Push(std::shared_ptr<TraceChunk> chunk);
  // Node `node`'s clock minus node 0's, and the bound on that estimate's error.
  void SetClock(uint32_t node, int64_t offset_ns, uint64_t error_ns);
  void SetHost(uint32_t node, const std::string& host);
  // No more input: the thread writes what is queued and closes the file.
  void Finish();
  // Once finished: whether the thread has closed the file.
  bool done() const { return done_.load(std::memory_order_acquire); }

  struct Stats {
    uint64_t events = 0, bytes = 0;
    uint64_t cut_by_cap = 0;    // events not written: the file reached max_bytes
    uint64_t queue_drops = 0;   // chunks Push refused
  };
  Stats stats() const;
  const std::string& path() const { return path_; }

 private:
  struct Clock {
    uint32_t node;
    int64_t offset_ns;
    uint64_t error_ns;
  };
  struct Host {
    uint32_t node;
    std::string name;
  };
  using Item = std::variant<std::shared_ptr<TraceChunk>, Clock, Host>;

  TimelineWriter(std::string path, FILE* file, uint64_t max_bytes, uint64_t start_ns);
  void Run();
  struct Name {
    std::string text, json;  // json: quoted and escaped
  };
  class Line;
  void Write(const TraceChunk& chunk);
  void Event(uint32_t node, const TraceEvent& e, const Name& name);
  // A tensor's life on a node: an async span with its phases nested (WAIT_FOR_RANKS, NEGOTIATE,
  // QUEUE, EXECUTE), and a rank's submission (an instant on the rank's thread).
  void TensorEvent(uint32_t node, const TraceEvent& e, const Name& name);
  void SubmitEvent(uint32_t node, const TraceEvent& e, const Name& name);
  void Emit(const std::string& line);  // one event, within the cap
  void Emit(const char* line, size_t n);
  void Thread(uint32_t node, uint32_t tid, const std::string& name);
  // A node's time on node 0's clock, in nanoseconds since the start.
  int64_t Ns(uint32_t node, uint64_t ns) const;

  const std::string path_;
  FILE* file_;
  const uint64_t max_bytes_, start_ns_;
  SpscQueue<Item> queue_{kQueueChunks};
  std::atomic<bool> finishing_{false}, done_{false};
  // Raises the writer thread from SCHED_IDLE to normal (the queue is half full, or Finish) and back
  // (the writer drained it to an eighth). Either thread may call it: a race leaves the wrong
  // priority only until the queue next crosses a threshold.
  void Boost(bool on);
  std::atomic<bool> boosted_{false};
  std::atomic<uint64_t> pushed_{0}, popped_{0};
  std::thread thread_;
  // Writer thread only.
  std::map<uint32_t, int64_t> offsets_;
  std::map<uint32_t, std::unordered_map<uint32_t, Name>> names_;  // node -> name id -> name
  std::set<std::pair<uint32_t, uint32_t>> threads_;                      // (node, tid) named
  std::set<uint32_t> processes_;
  uint64_t next_id_ = 1;
  bool capped_ = false, first_ = true;
  // Written by the writer thread, read by stats().
  std::atomic<uint64_t> events_{0}, bytes_{0}, cut_{0}, queue_drops_{0};
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_OBS_TIMELINE_WRITER_H_
