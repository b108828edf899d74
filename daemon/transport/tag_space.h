// The tag layout of a job's transport, in one place: every tag a daemon sends or receives on is
// built here, so no two uses can meet (tests/daemon/transport/tag_space_test.cc checks the
// ranges). Raise kWireVersion (base/version.h) with any change.
//
// On the wire a tag is 64 bits: source node (12) | job epoch (4) | the 48 bits below. The
// transport adds the first two (transport.h); everything else works with these 48:
//
//   47..42  slot: 0 the global set's collectives, 1..62 a process set's (SetTransport replaces
//           the slot bits of whatever its set sends), 63 the job's own tags
//   41..0   within slots 0..62, a collective:
//             cycle (10) | group (12) | segment (12) | slice (8)
//           cycle    0..511   negotiation cycles (numbers wrap: only neighbours overlap); group 0
//                             is the cycle's own agreement (segments 1..4), groups 1..4095 the
//                             fused groups it runs
//                  512..1022  TOPO plan groups (wrapping)
//                  1023       partial allreduce rounds: round (22) | part (2) in group and segment
//           slice: the host algorithm's (ring chunk, byte-broadcast part)
//           at the top of a process set's slot: its control tags (the set's slot, then ones)
//   slot 63, the job's own: control tags at the very top (control channel, job start
//           handshake, timeline chunks, point-to-point headers, health bundles), point-to-point data below them
//           (a 40-bit sequence number).
#ifndef SYNCD_DAEMON_TRANSPORT_TAG_SPACE_H_
#define SYNCD_DAEMON_TRANSPORT_TAG_SPACE_H_

#include <cstdint>

namespace syncd {

inline constexpr uint64_t kTagMask = (uint64_t{1} << 48) - 1;

// Slots: a process set's collectives carry its slot in the top six bits.
inline constexpr uint32_t kSetSlotShift = 42;
inline constexpr uint64_t kSetSlotMask = uint64_t{63} << kSetSlotShift;

// A collective's tag (before the slice bits): cycle | group | segment.
inline constexpr uint32_t kSliceBits = 8;
inline constexpr uint32_t kGroupShift = 12;
inline constexpr uint32_t kCycleShift = 24;
inline constexpr uint64_t kGroupsPerCycle = 4095;  // groups 1..4095; 0 is the agreement's
// Negotiation cycles use cycle numbers below kTopoTagCycleBit, TOPO groups above it.
inline constexpr uint64_t kTopoTagCycleBit = uint64_t{1} << 9;
inline constexpr uint64_t kPartialCycle = 1023;

// The base of negotiation cycle `seq` (segments 1..4 of group 0 are its agreement's).
inline constexpr uint64_t NegotiationCycleTag(uint64_t seq) { return (seq % kTopoTagCycleBit) << kCycleShift; }
// The base of the `seq`th TOPO plan group run.
inline constexpr uint64_t TopoCycleTag(uint64_t seq) {
  return (kTopoTagCycleBit | seq % (kTopoTagCycleBit - 1)) << kCycleShift;
}
// The tag of the `index`th fused group a cycle (or TOPO run) with base `base` executes.
inline constexpr uint64_t GroupTag(uint64_t base, uint64_t index) {
  return base | ((index % kGroupsPerCycle + 1) << kGroupShift);
}
// Partial allreduce round `seq`'s part `part` (0 the header, 1 the data).
inline constexpr uint64_t PartialRoundTag(uint64_t seq, uint64_t part) {
  return (kPartialCycle << kCycleShift) | ((seq & ((uint64_t{1} << 22) - 1)) << 2) | part;
}
// The transport tag of slice `slice` of a collective with tag `tag`.
inline constexpr uint64_t SliceTag(uint64_t tag, uint64_t slice = 0) { return (tag << kSliceBits) | slice; }

// Slot 63: the job's control tags, from the top.
inline constexpr uint64_t kControlTag = kTagMask;        // ControlMessage (coord/wire.h)
inline constexpr uint64_t kJoinHelloTag = kTagMask - 1;  // job start, round 1 (coord/job_join.h)
inline constexpr uint64_t kJoinReadyTag = kTagMask - 2;  // job start, round 2
inline constexpr uint64_t kTimelineTag = kTagMask - 3;   // timeline chunks to node 0 (engine/job_timeline.h)
inline constexpr uint64_t kP2pHeaderTag = kTagMask - 4;  // point-to-point headers (engine/point_to_point.h)
inline constexpr uint64_t kHealthTag = kTagMask - 5;     // health bundles past a control message (engine/health.cc)
inline constexpr uint64_t kJoinPlanTag = kTagMask - 6;   // job start, round 3: a TOPO plan (coord/job_join.h)
// ... and point-to-point data below them.
inline constexpr uint64_t kP2pDataTagBase = uint64_t{63} << kSetSlotShift;
inline constexpr uint64_t kP2pDataSeqMask = (uint64_t{1} << 40) - 1;
inline constexpr uint64_t P2pDataTag(uint64_t seq) { return kP2pDataTagBase | (seq & kP2pDataSeqMask); }

}  // namespace syncd

#endif  // SYNCD_DAEMON_TRANSPORT_TAG_SPACE_H_
