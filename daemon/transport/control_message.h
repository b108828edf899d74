// The control channel between daemons (kControlTag, transport/tag_space.h): one fixed-size message
// per notice, outside any coordination cycle, and its byte encoding. Coordination (job start,
// aborts, on-demand cycles), the kinds with rounds of their own (partial allreduce), the health
// view and the timeline all speak it. Every message carries the daemon protocol's version
// (kWireVersion, base/version.h); one of another version fails to decode, naming both.
#ifndef SYNCD_DAEMON_TRANSPORT_CONTROL_MESSAGE_H_
#define SYNCD_DAEMON_TRANSPORT_CONTROL_MESSAGE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "daemon/base/status.h"

namespace syncd {

// Each message carries the job it is about, so that a notice of an earlier job on the daemons
// is never taken for the current one's.
struct ControlMessage {
  enum class Kind : char {
    kAbort = 'A',  // the job failed; `text` says why
    kLeave = 'L',  // this node leaves the job (its daemon stops, or its ranks started another job)
    kCycle = 'C',  // on-demand coordination: please run cycle `cycle`
    kHello = 'H',  // job start, round 1 (coord/job_join.h)
    kReady = 'R',  // job start, round 2
    kPartialReport = 'P',  // partial allreduce: fresh contributions here (collectives/partial/runner.h)
    kPartialRun = 'Q',     // partial allreduce: run this round (from the set's node 0)
    kHealth = 'N',         // a chunk of a node's health report (coord/job_health.h)
    kTimelineStart = 'X',  // the timeline (engine/job_timeline.h): start, `text` the file
    kTimelineStop = 'Y',   // ... stop
    kClockPing = 'T',      // node 0's clock estimate: a ping sent at `cycle` (node 0's clock)
    kClockPong = 'U',      // ... its answer: `cycle` echoed, `text` the answering node's clock
    kNodeBack = 'B',  // a node whose every rank was lost has a replacement: take it back (to the global set's node 0)
    kNodeJoin = 'J',  // ... the answer to every node: `text` the node, `cycle` the membership, `code` the slot
    kNodeRestarted = 'D',  // node 0: a node's daemon was restarted (`text` "node pid pieces host", as kNodeJoin)
    kNodeAddress = 'K',    // ... its new UCX address, in hex: `cycle` the node, `code` the piece, `text` it
    kTopoJoined = 'S',  // TOPO: every rank of this node has joined: tell it the groups you run
    kTopoRun = 'G',     // ... to such a node: group run `cycle` (TopoRunner::seq) runs here
  };
  Kind kind = Kind::kAbort;
  uint64_t job = 0;
  uint64_t cycle = 0;
  std::string text;  // at most kControlTextBytes; longer text is cut
  int32_t code = 0;  // kAbort: the syncd_status every pending request fails with
};
inline constexpr size_t kControlMessageBytes = 384;
// kind, job, cycle, code, protocol version, text, its terminator.
inline constexpr size_t kControlTextBytes = kControlMessageBytes - 1 - 8 - 8 - 4 - 1 - 1;
// `out` holds kControlMessageBytes.
void EncodeControl(const ControlMessage& m, char* out);
StatusOr<ControlMessage> DecodeControl(const char* bytes, size_t n);

}  // namespace syncd

#endif  // SYNCD_DAEMON_TRANSPORT_CONTROL_MESSAGE_H_
