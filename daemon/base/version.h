#ifndef SYNCD_DAEMON_BASE_VERSION_H_
#define SYNCD_DAEMON_BASE_VERSION_H_

#include <cstdint>
#include <string>

namespace syncd {
inline constexpr const char* kVersionString = SYNCD_VERSION;  // set by CMake from project()

// The daemon-to-daemon protocol: the bytes and tags of everything one daemon sends another
// (control messages, negotiation lists, point-to-point headers, the collectives' layouts). Raise
// it with any change to them. The rendezvous refuses a daemon of another version, naming both;
// every structured message also carries it, so a message of another version is refused by name.
// 1 was the versionless protocol before it was counted; 3 caches the responses of kinds whose
// shapes vary by rank (allgather, alltoall, reducescatter), with every rank's rows; 4 sends health
// reports through a tree in bundles (kHealthTag); 5 picks a host allreduce's algorithm by node
// count as well as size (recursive halving, the tree) and counts each partial allreduce name's
// rounds on a coordinator of its own, its run messages down a tree; 7 adds an allreduce's
// compression ratio (top-k, random-k) to what the nodes agree on; 8 lets a node whose every rank
// joined stand in for TOPO groups (kTopoJoined, kTopoRun), and adds PowerSGD (compression 7); 9
// marks a join made for ranks the job goes on without (TensorMeta::absent: they stand in for
// process set changes); 10 adds Adasum (reduce op 5) to what the nodes agree on and run.
inline constexpr uint32_t kWireVersion = 10;

// Why a message `what` of protocol `version` is refused.
inline std::string WrongWireVersion(const char* what, uint32_t version) {
  return std::string(what) + " of daemon protocol " + std::to_string(version) + "; this daemon speaks " +
         std::to_string(kWireVersion) + " (every daemon of a job must run the same syncd)";
}
}

#endif  // SYNCD_DAEMON_BASE_VERSION_H_
