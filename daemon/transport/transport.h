// Point-to-point messaging among the daemons of one job: the interface every inter-node
// algorithm is written on. Implementations: ucx/ (the real one) and loopback/ (in-process, for
// unit tests). tests/daemon/transport/transport_conformance_test.cc runs against both.
//
// Contract
// - Owned and driven by one thread (the engine). Nothing blocks: Send/Recv post and return a
//   handle; Progress() moves data; Test() reports completion.
// - A posted buffer belongs to the transfer until the network is done with it, which can be
//   after Test() or Cancel() returned: UCX cannot withdraw a receive it has already matched, nor
//   a send whose data the peer has yet to take. So every Send/Recv names the buffer's owner and
//   the transport holds it until then; nothing writes to or reads from a buffer whose owner
//   was released. Keep the buffer untouched until Test() reports the handle finished.
// - Messages from one peer with one tag are matched in posting order. A receive must post the
//   exact size that was sent; a different size fails that receive.
// - A lost peer fails every pending operation that involves it, and PeerFailure() says which.
#ifndef SYNCD_DAEMON_TRANSPORT_TRANSPORT_H_
#define SYNCD_DAEMON_TRANSPORT_TRANSPORT_H_

#include <cstddef>
#include <poll.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/base/status.h"
#include "daemon/transport/tag_space.h"

namespace syncd {

using CommHandle = uint64_t;

// What keeps a posted buffer alive (a shared_ptr to the block it lies in, or to anything that
// owns that block). Empty only for buffers that outlive the transport.
using BufferOwner = std::shared_ptr<const void>;

enum class CommState { kPending, kDone, kFailed };

class Transport {
 public:
  virtual ~Transport() = default;

  virtual uint32_t rank() const = 0;
  virtual uint32_t size() const = 0;

  // `tag` uses the low 48 bits; the transport adds the source rank.
  virtual CommHandle Send(uint32_t peer, uint64_t tag, const void* data, size_t bytes, BufferOwner owner) = 0;
  virtual CommHandle Recv(uint32_t peer, uint64_t tag, void* data, size_t bytes, BufferOwner owner) = 0;

  // Makes progress on everything posted; returns whether anything happened.
  virtual bool Progress() = 0;
  // Bytes it was given to send to other nodes so far (the link bytes of the job it carries).
  virtual uint64_t bytes_sent() const { return 0; }
  virtual uint64_t messages_sent() const { return 0; }  // Send's, posted
  // Sleeps until the network may have something for Progress(), `wake_fd` (when >= 0) is
  // readable, or `timeout_ns` passed; returns whether it could wait at all (false at once: the
  // caller polls instead). For a thread with nothing but the network (and its doorbell) to wait for.
  virtual bool WaitForEvent(uint64_t timeout_ns, int wake_fd) {
    Transport* self = this;
    return WaitForEvents(&self, 1, timeout_ns, wake_fd);
  }
  // The parts of a sleep, for one thread asleep on several transports at once (WaitForEvents: a
  // node service's jobs, each with links of its own). ArmForSleep progresses what is left and
  // adds the descriptors to sleep on; kBusy: something came in meanwhile (do not sleep);
  // kCannot: this transport cannot signal (the caller polls). Woken: the descriptors it added, as
  // the sleep left them.
  enum class Arm { kArmed, kBusy, kCannot };
  virtual Arm ArmForSleep(std::vector<pollfd>* fds) {
    (void)fds;
    return Arm::kCannot;
  }
  virtual void Woken(const pollfd* fds, size_t n) {
    (void)fds;
    (void)n;
  }
  // Sleeps until any of the `n` transports may have something, `wake_fd` (when >= 0) is
  // readable, or `timeout_ns` passed; false at once where one of them cannot sleep.
  static bool WaitForEvents(Transport* const* transports, size_t n, uint64_t timeout_ns, int wake_fd);

  // kPending, or the final state (the handle is released then). On kFailed, *error says why.
  virtual CommState Test(CommHandle h, Status* error) = 0;

  // Withdraws a pending operation (used when a collective aborts). The transport lets go of the
  // buffer's owner once the network no longer touches the buffer.
  virtual void Cancel(CommHandle h) = 0;

  // Jobs: the daemons of a job may serve one job after another, and the messages of one must
  // never match the receives of the next (a cycle cut off by an abort leaves messages behind).
  // Every message carries its sender's epoch, the low kEpochBits bits of `epoch`, and a receive
  // matches only messages of its own epoch. Call between jobs with nothing posted; messages of
  // other epochs that have arrived are discarded.
  virtual void SetEpoch(uint32_t epoch) = 0;
  // Drops every message that has arrived and matched no posted receive, of any tag or epoch.
  // With per-peer ordering this lets a job start clean: once a peer's "I have left the old job"
  // notice is in, everything it sent before is in too (see Negotiator's join).
  virtual void DiscardArrived() = 0;

  // The first peer failure seen (message names the node), if any.
  virtual std::optional<Status> PeerFailure() const = 0;
  // Whether this peer is known to be lost.
  virtual bool PeerLost(uint32_t peer) const = 0;
  // Node `peer`'s daemon, lost, came back as a new process (UcxTransport::Reconnect says how).
  virtual Status Reconnect(uint32_t peer, const std::string& address, int32_t same_host_pid, uint32_t keep_slot) {
    (void)address, (void)same_host_pid, (void)keep_slot;
    return Status(SYNCD_ERR_INVALID, "node " + std::to_string(peer) + ": this transport cannot reach a peer again");
  }
};

// Bits of the epoch on the wire (above the 48 tag bits, tag_space.h), and the largest job the source rank's
// remaining bits can name.
inline constexpr uint32_t kEpochBits = 4;
inline constexpr uint32_t kEpochMask = (1u << kEpochBits) - 1;
inline constexpr uint32_t kMaxTransportRanks = 1u << (64 - 48 - kEpochBits);

}  // namespace syncd

#endif  // SYNCD_DAEMON_TRANSPORT_TRANSPORT_H_
