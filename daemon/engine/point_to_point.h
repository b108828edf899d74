// Point-to-point transfers (abi::OpKind::kSend, kRecv; torch.distributed's send and recv): a
// tensor from one rank to another of the same process set, through their daemons, never
// coordinated with the job's other ranks or nodes.
//
// Matching happens in the receiver's daemon, as in MPI: a receive takes the first send of its
// process set and tag from its source (or, -1, any source) that reached the daemon and was not
// taken, so messages from one rank with one tag are never overtaken.
// - Same node: a send waits in the daemon until a receive takes it; its data is copied from the
//   sender's arena straight into the receiver's and both complete.
// - Across nodes: the sender's daemon sends a header (kP2pHeaderTag) and the data (a tag of its
//   own, numbered per destination node) at once, the data straight out of the sender's arena.
//   The receiver's daemon reads headers only while one of its ranks waits in a receive (what
//   arrives meanwhile waits in the transport), and once a receive takes a header it receives
//   the data straight into the receiver's arena. A send completes once the network is done with
//   its data (UCX: small sends at once, large ones once the receiver took them).
// Nothing goes on the network before every node has started the job (Links::started): sends to
// other nodes wait here, and headers are not read.
// A receive whose dtype or size differ from the send it takes fails, naming both ranks and both
// sizes; the send completes. The job failing (a lost rank or node, a stall) fails every transfer.
// A rank that detaches cleanly ends the receives that wait for it on its own node once it has not
// attached again within the grace period; other nodes are not told. A notice would be read late
// (headers are read only while a receive waits) and could fail a receive meant for the rank's
// next attach (every rank may detach and attach again, as Horovod's shutdown() then init()): it
// would need the rank's attach count in every header, which is not there.
//
// Engine thread only.
#ifndef SYNCD_DAEMON_ENGINE_POINT_TO_POINT_H_
#define SYNCD_DAEMON_ENGINE_POINT_TO_POINT_H_

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "daemon/base/status.h"
#include "daemon/core/request.h"
#include "daemon/core/request_ledger.h"
#include "daemon/obs/status_snapshot.h"
#include "daemon/transport/set_transport.h"
#include "daemon/transport/transport.h"

namespace syncd {

// Tags on the job's transport (transport/tag_space.h): headers on kP2pHeaderTag, data on
// P2pDataTag(seq) below the job's control tags.

// What the sender's daemon tells the receiver's about one send.
struct P2pHeader {
  uint32_t magic = 0;
  int32_t src = 0, dst = 0, set = 0;  // global ranks, the process set
  int64_t tag = 0;
  uint64_t bytes = 0;
  uint64_t seq = 0;  // the data's tag: kP2pDataTagBase | (seq & kP2pDataSeqMask)
  uint64_t job = 0;
  uint32_t dtype = 0;
  uint32_t version = 0;  // kWireVersion
  uint64_t reserved = 0;
};
static_assert(sizeof(P2pHeader) == 64);
inline constexpr uint32_t kP2pMagic = 0x50325031;  // "P2P1"

class PointToPoint {
 public:
  struct Links {
    Transport* transport = nullptr;  // the job's daemons; nullptr: one node
    uint64_t job = 0;
    uint32_t node_rank = 0;
    uint32_t local_size = 1;
    // Whether every node has started the job: until then nothing goes on the network (a peer
    // still in the start handshake drops what arrives, coord/job_join.h).
    std::function<bool()> started;
    // Where each request stands (nullptr: nowhere): a transfer on the wire is executing.
    RequestLedger* ledger = nullptr;
  };

  // A new job: nothing of the previous one may be left (EndAll first).
  void BeginJob(Links links);
  // A checked kSend or kRecv of a rank of this node.
  void Add(Request r);
  // What ended since the last call (transferred, refused or failed), each request with its
  // outcome, for the engine to complete: point-to-point completes nothing itself. Every call
  // below may end requests.
  struct Ended {
    Request request;
    Status status;
  };
  std::vector<Ended> TakeEnded() { return std::exchange(ended_, {}); }
  // Moves transfers on; returns whether anything happened.
  bool Poll();
  // Transfers this daemon holds (sends not yet taken or on the network, receives waiting).
  size_t InFlight() const {
    return offers_local_ + recvs_.size() + incoming_.size() + outgoing_.size() + early_sends_.size();
  }
  // Whether the engine must keep polling: something is on the network, or a receive waits for one.
  bool WaitsOnNetwork() const;

  // Whether global rank `rank` of this node has a send or receive waiting here (one that detaches
  // then abandons it, as it would a collective).
  bool Holds(uint32_t rank) const;
  // Local rank `local_rank` (global `rank`) is gone: its transfers end, and receives that wait
  // for it (from it, or from any rank) fail with `why`.
  void EndRank(uint32_t local_rank, uint32_t rank, const Status& why);
  // Everything of process set `set` (-1: every set) fails with `why`; posted network operations
  // are withdrawn.
  void EndAll(const Status& why, int32_t set = -1);
  // Receives, and sends to a rank of this node, that have waited at least `min_age_ns` for their
  // peer: as stalls (the tensor named with its direction and tag), process set `set` (-1: all).
  std::vector<StallSnapshot> Waits(uint64_t now_ns, uint64_t min_age_ns, int32_t set = -1) const;

 private:
  // A send the receiver's daemon knows of: from one of its ranks (`local`), or announced by
  // another node's header.
  struct Offer {
    P2pHeader header;
    std::optional<Request> local;
    uint32_t node = 0;  // the sender's node (not local)
  };
  struct Transfer {
    Request request;
    CommHandle header = 0, data = 0;  // 0: done or never posted
    std::shared_ptr<P2pHeader> header_bytes;
    std::shared_ptr<std::vector<char>> scratch;  // a mismatched receive's data goes here
    Status outcome;                              // what the request completes with
  };

  uint32_t NodeOf(uint32_t rank) const { return rank / links_.local_size; }
  // Whether a send from another node may satisfy receive `r`.
  bool FromAfar(const Request& r) const;
  void Send(Request r);
  // Matches waiting receives with offers, in order; returns whether any matched.
  bool Match();
  void Deliver(Request recv, Offer offer);
  // Header receives: posted for every node a waiting receive may hear from; what arrived, taken.
  bool PollHeaders();
  bool PollTransfers(std::vector<Transfer>* transfers);
  void Complete(Request r, const Status& st) { ended_.push_back({std::move(r), st}); }
  bool Started();
  // Fails the sends waiting for the job to start that `which` selects.
  void FailEarlySends(const std::function<bool(const Request&)>& which, const Status& why);

  Links links_;
  std::deque<Offer> offers_;
  size_t offers_local_ = 0;  // offers_ holding a local send
  std::deque<Request> recvs_;
  std::vector<Transfer> incoming_, outgoing_;
  struct HeaderSlot {
    CommHandle handle = 0;
    std::shared_ptr<P2pHeader> bytes;
  };
  std::vector<HeaderSlot> headers_;  // by node
  std::vector<uint64_t> next_seq_;   // by destination node
  std::deque<Request> early_sends_;  // to other nodes, before the job started on every node
  bool started_ = false;             // Links::started said so once this job
  std::vector<Ended> ended_;         // for TakeEnded
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_ENGINE_POINT_TO_POINT_H_
