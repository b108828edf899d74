#include "daemon/coord/job_join.h"

#include <array>
#include <memory>

#include "daemon/base/hex.h"
#include "daemon/coord/wire.h"

namespace syncd {
namespace {

using Message = std::array<char, kControlMessageBytes>;

// Whether `in` is `kind` for `job`. A message of the same kind for another job can only be a
// leftover whose epoch happens to equal this job's: it is skipped. Anything else breaks the protocol.
// `cycle` and `text`, when given, get the message's.
StatusOr<bool> IsFor(const Message& in, ControlMessage::Kind kind, uint64_t job, uint32_t peer,
                     uint64_t* cycle = nullptr, std::string* text = nullptr) {
  StatusOr<ControlMessage> m = DecodeControl(in.data(), in.size());
  if (!m.ok() || m->kind != kind)
    return Status(SYNCD_ERR_PROTOCOL, "node " + std::to_string(peer) + " broke the job start handshake" +
                                          (m.ok() ? "" : ": " + m.status().message()));
  if (cycle) *cycle = m->cycle;
  if (text) *text = std::move(m->text);
  return m->job == job;
}

// The `cycle` of a HELLO or READY: what it says of the GPUs.
constexpr uint64_t kGpuRebuild = 1;  // HELLO: rebuild, please; node 0's READY: the id is in the text

}  // namespace

CommTask JoinJob(Transport* t, uint64_t job, std::vector<bool>* joined, GpuRestart* gpu) {
  const uint32_t n = t->size(), me = t->rank();
  joined->assign(n, false);
  (*joined)[me] = true;
  // Owned with the transfers: a handshake cut off may leave them on the wire.
  const auto hello = std::make_shared<Message>(), ready = std::make_shared<Message>();
  const bool rebuild_here = gpu != nullptr && gpu->rebuild;
  EncodeControl(ControlMessage{ControlMessage::Kind::kHello, job, rebuild_here ? kGpuRebuild : 0, ""}, hello->data());
  bool rebuild = rebuild_here;
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
      uint64_t says = 0;
      StatusOr<bool> ours = IsFor(in[p], ControlMessage::Kind::kHello, job, p, &says);
      if (!ours.ok()) co_return ours.status();
      if (*ours) {
        (*joined)[p] = true;
        rebuild |= says == kGpuRebuild;
      } else {
        again.push_back(p);
      }
    }
    waiting = std::move(again);
  }

  // Node 0's READY carries a fresh NCCL id when any node asked for one.
  ControlMessage ready_message{ControlMessage::Kind::kReady, job, 0, ""};
  if (me == 0 && rebuild && gpu != nullptr && gpu->make_id) {
    StatusOr<std::string> id = gpu->make_id();
    if (id.ok()) {
      gpu->nccl_id = *id;
      ready_message.cycle = kGpuRebuild;
      ready_message.text = Hex(*id);
    } else {
      gpu->error = id.status();
    }
  }
  EncodeControl(ready_message, ready->data());

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
    uint64_t says = 0;
    std::string text;
    StatusOr<bool> ours = IsFor(in[p], ControlMessage::Kind::kReady, job, p, &says, &text);
    if (!ours.ok()) co_return ours.status();
    if (!*ours) co_return Status(SYNCD_ERR_PROTOCOL, "node " + std::to_string(p) + " is ready for another job");
    if (p == 0 && says == kGpuRebuild && gpu != nullptr) {
      StatusOr<std::string> id = Unhex(text, "node 0 sent an NCCL id");
      if (!id.ok()) co_return id.status();
      gpu->nccl_id = std::move(*id);
    } else if (p == 0 && rebuild && gpu != nullptr) {
      gpu->error = Status(SYNCD_ERR_SYSTEM, "node 0 could not make an NCCL id to rebuild the GPU communicators with");
    }
  }
  co_return Status::Ok();
}

}  // namespace syncd
