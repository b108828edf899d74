// The control channel of a set's daemons (transport/control_message.h): one fixed-size message per
// send on kControlTag, one receive posted per peer. It carries messages only: what they mean (an
// abort, a node leaving, a cycle wanted, the notices of the partial rounds and of the engine) is
// the negotiator's (job_control.cc). Coordination's own messages count as its traffic (the
// counted transport); the engine's notices do not.
//
// Engine thread only.
#ifndef SYNCD_DAEMON_COORD_CONTROL_CHANNEL_H_
#define SYNCD_DAEMON_COORD_CONTROL_CHANNEL_H_

#include <array>
#include <cstdint>
#include <list>
#include <memory>
#include <vector>

#include "daemon/base/status.h"
#include "daemon/transport/control_message.h"
#include "daemon/transport/transport.h"

namespace syncd {

class ControlChannel {
 public:
  // `counted`: coordination's view of the set's transport; `raw`: the same, uncounted.
  ControlChannel(Transport* counted, Transport* raw);
  ~ControlChannel();  // cancels what is in flight
  ControlChannel(const ControlChannel&) = delete;
  ControlChannel& operator=(const ControlChannel&) = delete;

  // Posts a receive for every peer (once the job start handshake is done: before it, the
  // handshake's messages share the tag).
  void Open();
  // Sends `m` to `node`, or to every other node not known to be lost when `node` is -1. `notice`:
  // not coordination's (uncounted).
  void Send(int32_t node, const ControlMessage& m, bool notice);
  // Drops the sends that completed (a failed one means a lost peer, which its own loss reports);
  // returns whether sends are still in flight.
  bool Reap();
  // Progresses the transport until every send has left or the deadline passes; returns whether
  // they have.
  bool Flush(uint64_t deadline_ns);
  // What arrived since the last look: at most one message per peer, in peer order (the list is the
  // channel's, reused: valid until the next call, its messages the caller's to move out); the
  // peer's next receive is posted for each that decoded. A receive that failed (`lost`: the peer is) or
  // a message that does not decode comes as its error, and that peer is listened to no more.
  struct Incoming {
    uint32_t from = 0;
    bool lost = false;
    StatusOr<ControlMessage> message;
  };
  std::vector<Incoming>& Receive();

 private:
  using Bytes = std::array<char, kControlMessageBytes>;
  struct Outgoing {
    std::shared_ptr<Bytes> bytes;
    CommHandle handle;
  };
  void Listen(uint32_t peer);

  Transport* counted_;
  Transport* raw_;
  std::list<Outgoing> out_;
  std::vector<std::shared_ptr<Bytes>> in_;  // each owned with its receive
  std::vector<CommHandle> recvs_;
  std::vector<Incoming> arrived_;  // Receive's, its room kept from call to call
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_COORD_CONTROL_CHANNEL_H_
