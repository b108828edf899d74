#include "daemon/coord/job_join.h"

#include <array>
#include <memory>

#include "daemon/coord/wire.h"

namespace syncd {
namespace {

using Message = std::array<char, kControlMessageBytes>;

// Whether `in` is `kind` for `job`. A message of the same kind for another job can only be a
// leftover whose epoch happens to equal this job's: it is skipped. Anything else breaks the protocol.
StatusOr<bool> IsFor(const Message& in, ControlMessage::Kind kind, uint64_t job, uint32_t peer) {
  StatusOr<ControlMessage> m = DecodeControl(in.data(), in.size());
  if (!m.ok() || m->kind != kind)
    return Status(SYNCD_ERR_PROTOCOL, "node " + std::to_string(peer) + " broke the job start handshake" +
                                          (m.ok() ? "" : ": " + m.status().message()));
  return m->job == job;
}

}  // namespace

CommTask JoinJob(Transport* t, uint64_t job, std::vector<bool>* joined) {
  const uint32_t n = t->size(), me = t->rank();
  joined->assign(n, false);
  (*joined)[me] = true;
  // Owned with the transfers: a handshake cut off may leave them on the wire.
  const auto hello = std::make_shared<Message>(), ready = std::make_shared<Message>();
  EncodeControl(ControlMessage{ControlMessage::Kind::kHello, job, 0, ""}, hello->data());
  EncodeControl(ControlMessage{ControlMessage::Kind::kReady, job, 0, ""}, ready->data());
  const auto in_buffer = std::make_shared<std::vector<Message>>(n);
  std::vector<Message>& in = *in_buffer;

  // Round 1: HELLO both ways; a receive that got another job's HELLO is posted again.
  std::vector<CommHandle> handles;
  std::vector<uint32_t> waiting;
  for (uint32_t p = 0; p < n; ++p)
    if (p != me) {
      handles.push_back(t->Send(p, kJoinHelloTag, hello->data(), hello->size(), hello));
      waiting.push_back(p);
    }
  while (!waiting.empty()) {
    for (uint32_t p : waiting) handles.push_back(t->Recv(p, kJoinHelloTag, in[p].data(), in[p].size(), in_buffer));
    Status st = co_await Wait(t, std::move(handles));
    if (!st.ok()) co_return st;
    handles.clear();
    std::vector<uint32_t> again;
    for (uint32_t p : waiting) {
      StatusOr<bool> ours = IsFor(in[p], ControlMessage::Kind::kHello, job, p);
      if (!ours.ok()) co_return ours.status();
      if (*ours) (*joined)[p] = true;
      else again.push_back(p);
    }
    waiting = std::move(again);
  }

  // Round 2: READY receives first, so that the drop below cannot take a READY already in.
  for (uint32_t p = 0; p < n; ++p)
    if (p != me) handles.push_back(t->Recv(p, kJoinReadyTag, in[p].data(), in[p].size(), in_buffer));
  t->DiscardArrived();
  for (uint32_t p = 0; p < n; ++p)
    if (p != me) handles.push_back(t->Send(p, kJoinReadyTag, ready->data(), ready->size(), ready));
  Status st = co_await Wait(t, std::move(handles));
  if (!st.ok()) co_return st;
  for (uint32_t p = 0; p < n; ++p) {
    if (p == me) continue;
    StatusOr<bool> ours = IsFor(in[p], ControlMessage::Kind::kReady, job, p);
    if (!ours.ok()) co_return ours.status();
    if (!*ours) co_return Status(SYNCD_ERR_PROTOCOL, "node " + std::to_string(p) + " is ready for another job");
  }
  co_return Status::Ok();
}

}  // namespace syncd
