// The timeline recorder: what happened when, on the engine thread, for the job-wide Chrome trace
// (obs/timeline_writer.h formats it). Recording is appending a fixed-size binary event to the
// current chunk (a few tens of nanoseconds; tensor names are interned, their text recorded once
// per chunk stream); formatting and writing happen elsewhere: full chunks go to `sink`, which
// hands them to the writer thread (node 0) or sends them to node 0 (the other nodes).
//
// Bounded: a chunk is kChunkBytes; the sink may refuse one (its queue is full) and the chunk's
// events are then dropped and counted, never buffered without limit.
//
// Threads: engine thread only. Times are this daemon's abi::MonotonicNs().
#ifndef SYNCD_DAEMON_CORE_TIMELINE_H_
#define SYNCD_DAEMON_CORE_TIMELINE_H_

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/base/version.h"

namespace syncd {

enum class TraceKind : uint8_t {
  kName = 1,      // defines name id `name` as the `bytes` characters that follow the event
  kSubmit,        // instant: rank `rank` submitted tensor `name` (t0)
  kTensor,        // one tensor on this node: first submission t0, all local ranks in t2, agreed
                  // with the other nodes t3, execution started t4, completed t1
  kCycle,         // a coordination cycle of set `set` (number in `group`)
  kGroup,         // a fused group executing: `count` tensors, `bytes`, group number `group`
  kReduce,        // local reduction into the fusion buffer (a pipeline segment of `bytes`)
  kNetwork,       // an inter-node step of one segment (`count`: its pipeline slot)
  kScatter,       // the result copied back to the ranks' tensors (a segment)
  kGpu,           // a GPU group: NCCL and the copies, enqueued at t0, seen done at t1
  kPartialRound,  // a partial allreduce round of `name`: `count` fresh ranks (NAP), round `group`
  kPlanGroup,     // instant: TOPO plan group `group` issued
  kMark,          // instant: a named marker (timeline start, drops)
};

struct TraceEvent {
  uint64_t t0 = 0, t1 = 0;  // begin, end (an instant: t1 == t0)
  uint64_t t2 = 0, t3 = 0, t4 = 0;
  uint64_t bytes = 0;
  uint32_t name = 0;   // interned (Timeline::Name), 0: none
  int32_t rank = -1;   // global rank, -1: the daemon
  int32_t set = 0;
  uint32_t group = 0;
  uint32_t count = 0;
  TraceKind kind = TraceKind::kMark;
  uint8_t op_kind = 0;  // abi::OpKind
  uint8_t dtype = 0;
  uint8_t failed = 0;
};

// A chunk: a header, then events, each kName event followed by its text padded to 8 bytes.
struct TraceChunk {
  static constexpr size_t kBytes = 64 * 1024;
  struct Header {
    uint32_t magic = 0x53594E54;  // "SYNT"
    uint32_t used = 0;            // bytes of events after the header
    uint32_t node = 0;
    uint32_t last = 0;            // 1: the node's last chunk of this timeline
    uint64_t seq = 0;             // per node, from 0
    uint64_t dropped = 0;         // events this node dropped so far
    uint32_t version = kWireVersion;  // the daemon protocol (base/version.h)
    uint32_t reserved = 0;
  };
  alignas(8) char bytes[kBytes];
  Header& header() { return *reinterpret_cast<Header*>(bytes); }
  const Header& header() const { return *reinterpret_cast<const Header*>(bytes); }
  static constexpr size_t kPayload = kBytes - sizeof(Header);
};

class Timeline {
 public:
  // Takes a full (or flushed) chunk; false: it cannot now, the chunk's events are dropped.
  using Sink = std::function<bool(std::shared_ptr<TraceChunk>)>;

  bool on() const { return on_; }
  // Starts recording as node `node`, chunks going to `sink`.
  void Start(uint32_t node, Sink sink);
  // Sends what is recorded, marked as the last chunk, and stops.
  void Stop();
  // Sends the current chunk if it holds anything (call now and then: events reach the file
  // within that period).
  void Flush();

  // The id of `name`, recorded with the current chunk stream the first time.
  uint32_t Name(const std::string& name);
  void Record(const TraceEvent& e) {
    if (!on_) return;
    if (e.set == 0) {
      cycles_ += e.kind == TraceKind::kCycle;
      groups_ += e.kind == TraceKind::kGroup;
    }
    if (used_ + sizeof(TraceEvent) > TraceChunk::kPayload) Rotate();
    memcpy(chunk_->bytes + sizeof(TraceChunk::Header) + used_, &e, sizeof(e));
    used_ += sizeof(TraceEvent);
    ++events_;
  }
  uint64_t events() const { return events_; }
  uint64_t dropped() const { return dropped_; }
  // Of the global set, since Start: coordination cycles that agreed on tensors, groups executed.
  uint64_t cycles() const { return cycles_; }
  uint64_t groups() const { return groups_; }

 private:
  void Rotate(bool last = false);
  bool on_ = false;
  uint32_t node_ = 0;
  Sink sink_;
  std::shared_ptr<TraceChunk> chunk_;
  size_t used_ = 0;
  uint64_t seq_ = 0, events_ = 0, dropped_ = 0, in_chunk_ = 0, cycles_ = 0, groups_ = 0;
  std::unordered_map<std::string, uint32_t> names_;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_CORE_TIMELINE_H_
