// The job's timeline, started and stopped at run time (--timeline, syncctl timeline, hvd's
// start_timeline): every daemon records (core/timeline.h), node 0 writes the one file
// (obs/timeline_writer.h).
//
// Across nodes:
// - Start and stop go to every daemon on the control channel (kTimelineStart, kTimelineStop); a
//   daemon asked directly (syncctl, a rank) forwards to node 0, which tells every node.
// - The other nodes send their chunks to node 0 on their own tag (kTimelineTag), at most
//   kChunksInFlight at once (more are dropped and counted).
// - Clocks: node 0 pings each node (kClockPing, kClockPong) every kPingPeriodNs. A pong says the
//   node's clock t1 when it answered a ping sent at t0 and answered at t2 (node 0's clock); the
//   node's clock is then ahead by t1 - (t0 + t2) / 2, within (t2 - t0) / 2. Of the last
//   kPingWindow pings, the one with the shortest round trip gives the estimate (Cristian's
//   algorithm; the error bound is that ping's half round trip). A node's chunks wait at node 0
//   until its first estimate is in.
//
// Threads: engine thread only.
#ifndef SYNCD_DAEMON_ENGINE_JOB_TIMELINE_H_
#define SYNCD_DAEMON_ENGINE_JOB_TIMELINE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/base/status.h"
#include "daemon/coord/wire.h"
#include "daemon/core/timeline.h"
#include "daemon/obs/timeline_writer.h"
#include "daemon/transport/transport.h"

namespace syncd {

class JobTimeline {
 public:
  static constexpr uint64_t kFlushPeriodNs = 100'000'000;
  static constexpr uint64_t kPingPeriodNs = 1'000'000'000;
  static constexpr uint32_t kPingWindow = 8;
  static constexpr size_t kChunksInFlight = 16;

  struct Links {
    Transport* transport = nullptr;  // the job's daemons (nullptr: one node)
    // Sends a control message to node `node`, or to every other node with -1; false: it cannot.
    std::function<bool(int32_t node, ControlMessage m)> tell;
    uint64_t job = 0;
  };

  // `max_bytes`: node 0's file cap; `owner`: a node service's job's user (obs/timeline_writer.h).
  explicit JobTimeline(uint64_t max_bytes, std::optional<FileOwner> owner = std::nullopt)
      : max_bytes_(max_bytes), owner_(std::move(owner)) {}
  ~JobTimeline();

  // A new job: what the previous one recorded is finished; `links` reach the new one's daemons.
  void BeginJob(Links links);
  void EndJob();
  uint64_t job() const { return links_.job; }  // the job whose daemons it reaches (BeginJob)

  // Asked on this node. Start: `path` is written by node 0; it stops by itself after `seconds`
  // (0: never) or `cycles` coordination cycles of the global set (0: never).
  Status Start(const std::string& path, double seconds, uint64_t cycles);
  Status Stop();
  // A timeline control message from node `from` (kTimelineStart, kTimelineStop, kClockPing,
  // kClockPong).
  void Receive(uint32_t from, const ControlMessage& m);
  // Flushes, moves chunks, pings, applies the limits, finishes the file. Returns whether it did work.
  bool Poll(uint64_t now_ns);

  Timeline* recorder() { return &recorder_; }
  TimelineState State() const;

 private:
  uint32_t node() const { return links_.transport ? links_.transport->rank() : 0; }
  uint32_t nodes() const { return links_.transport ? links_.transport->size() : 1; }
  // Turns recording on here (node 0: opens the file); `tell`: node 0 tells the other nodes.
  Status StartHere(const std::string& path, double seconds, uint64_t cycles);
  void StopHere();
  bool Sink(std::shared_ptr<TraceChunk> chunk);
  bool PollTransfers();
  void PostReceive(uint32_t peer);
  void Ping(uint64_t now_ns);
  // Other nodes: sends forward_ to node 0 if it can be told yet.
  void Forward();

  const uint64_t max_bytes_;
  const std::optional<FileOwner> owner_;
  Links links_;
  Timeline recorder_;
  std::unique_ptr<TimelineWriter> writer_;   // node 0, while a file is open
  std::vector<std::unique_ptr<TimelineWriter>> closing_;  // finished, writing what is queued
  std::string path_;
  uint64_t start_ns_ = 0, stop_at_ns_ = 0, stop_at_cycles_ = 0, last_flush_ns_ = 0;
  bool told_ = true;
  std::optional<ControlMessage> forward_;  // other nodes: a start or stop for node 0 not sent yet  // node 0: the other nodes know of the running timeline (else: tell them again)
  // Node 0 stopped recording: it waits for each node's last chunk until this deadline.
  uint64_t closing_deadline_ns_ = 0;
  std::vector<bool> last_in_;
  // Other nodes: chunks on their way to node 0.
  struct Outgoing {
    std::shared_ptr<TraceChunk> chunk;
    CommHandle handle;
  };
  std::list<Outgoing> out_;
  std::deque<std::shared_ptr<TraceChunk>> unsent_;  // made while out_ was full: waiting for room
  // Node 0: a receive posted per node, and chunks held until the node's clock is known.
  std::vector<std::shared_ptr<TraceChunk>> in_;
  std::vector<CommHandle> recvs_;
  std::vector<std::deque<std::shared_ptr<TraceChunk>>> held_;
  // Node 0: clock estimates per node (offset, error bound; sample count), pings of the window.
  struct ClockEstimate {
    int64_t offset_ns = 0;
    uint64_t error_ns = UINT64_MAX;
    uint32_t samples = 0;
    std::deque<std::pair<int64_t, uint64_t>> window;  // (offset, half round trip)
  };
  std::vector<ClockEstimate> clocks_;
  uint64_t last_ping_ns_ = 0;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_ENGINE_JOB_TIMELINE_H_
