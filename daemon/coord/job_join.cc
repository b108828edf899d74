#include "daemon/coord/job_join.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>

#include "daemon/base/hex.h"
#include "daemon/coord/wire.h"
#include "daemon/plan/plan_codec.h"

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

// A HELLO's text: "plan <hash in hex>" when the node holds one, empty otherwise; SharePlan sends
// it alone, in kPlanWordBytes.
constexpr size_t kPlanWordBytes = 32;
std::string PlanWord(uint64_t hash) {
  char text[32];
  snprintf(text, sizeof(text), "plan %016llx", (unsigned long long)hash);
  return text;
}

StatusOr<std::optional<uint64_t>> ParsePlanWord(const std::string& text, uint32_t peer) {
  if (text.empty()) return std::optional<uint64_t>();
  unsigned long long hash = 0;
  char end = 0;
  if (text.size() != 21 || sscanf(text.c_str(), "plan %16llx%c", &hash, &end) != 1)
    return Status(SYNCD_ERR_PROTOCOL, "node " + std::to_string(peer) + "'s HELLO says '" + text + "'");
  return std::optional<uint64_t>(hash);
}

// Round 3, decided alike on every node from what each HELLO named (nullopt: none): who sends the
// plan (`from`, the lowest holder) to whom (`to`), or why nobody keeps one (`conflict`).
struct CarryDecision {
  std::optional<uint64_t> hash;
  uint32_t from = 0;
  std::vector<uint32_t> to;
  std::string conflict;
};

CarryDecision DecideCarry(const std::vector<std::optional<uint64_t>>& held) {
  CarryDecision d;
  for (uint32_t p = 0; p < held.size(); ++p) {
    if (!held[p]) continue;
    if (!d.hash) {
      d.hash = held[p];
      d.from = p;
    } else if (*held[p] != *d.hash && d.conflict.empty()) {
      d.conflict = "node " + std::to_string(d.from) + " of the set holds TOPO " + PlanWord(*d.hash) + ", node " +
                   std::to_string(p) + " " + PlanWord(*held[p]) + ": the set goes on negotiated";
    }
  }
  if (!d.conflict.empty()) d.hash.reset();
  for (uint32_t p = 0; p < held.size() && d.hash; ++p)
    if (!held[p]) d.to.push_back(p);
  return d;
}

// The largest plan a node takes: 2^24 tensors (kGraphMaxOps) of short names.
constexpr uint64_t kMostPlanBytes = uint64_t{1} << 30;

CommTask SendPlan(Transport* t, uint64_t tag, const CarryDecision& d, const TopoPlan& plan) {
  const auto bytes = std::make_shared<const std::string>(EncodePlan(plan));
  const auto size = std::make_shared<const uint64_t>(bytes->size());
  CommHandles handles;
  for (uint32_t p : d.to) {
    handles.push_back(t->Send(p, tag, size.get(), sizeof(uint64_t), size));
    handles.push_back(t->Send(p, tag, bytes->data(), bytes->size(), bytes));
  }
  co_return co_await Wait(t, std::move(handles));
}

CommTask ReceivePlan(Transport* t, uint64_t tag, const CarryDecision& d, PlanCarry* carry) {
  const std::string from = "node " + std::to_string(d.from);
  const auto size = std::make_shared<uint64_t>(0);
  Status st = co_await Wait(t, t->Recv(d.from, tag, size.get(), sizeof(uint64_t), size));
  if (!st.ok()) co_return st;
  if (*size == 0 || *size > kMostPlanBytes)
    co_return Status(SYNCD_ERR_PROTOCOL, from + " sends a TOPO plan of " + std::to_string(*size) + " bytes");
  const auto bytes = std::make_shared<std::string>(*size, '\0');
  st = co_await Wait(t, t->Recv(d.from, tag, bytes->data(), bytes->size(), bytes));
  if (!st.ok()) co_return st;
  StatusOr<TopoPlan> plan = DecodePlan(bytes->data(), bytes->size());
  if (!plan.ok()) co_return plan.status();
  if (plan->hash != *d.hash)
    co_return Status(SYNCD_ERR_PROTOCOL, from + " named TOPO " + PlanWord(*d.hash) + " and sent " + PlanWord(plan->hash));
  carry->plan = std::make_shared<const TopoPlan>(std::move(*plan));
  co_return Status::Ok();
}

// The plan from the lowest holder to the nodes without it, as `d` decided (on `tag`).
CommTask MovePlan(Transport* t, uint64_t tag, const CarryDecision& d, PlanCarry* carry) {
  const uint32_t me = t->rank();
  if (!d.conflict.empty()) {
    carry->plan.reset();
    carry->error = Status(SYNCD_ERR_INVALID, d.conflict);
  }
  if (!d.hash || d.to.empty()) co_return Status::Ok();
  CommTask move;
  if (me == d.from) move = SendPlan(t, tag, d, *carry->plan);
  else if (std::find(d.to.begin(), d.to.end(), me) != d.to.end()) move = ReceivePlan(t, tag, d, carry);
  else co_return Status::Ok();
  co_return co_await Await(&move);
}

// Round 1: HELLO both ways; a receive that got another job's HELLO is posted again. `rebuild` and
// `held` (by node) get what the HELLOs say of GPUs and plans.
CommTask SayHello(Transport* t, uint64_t job, ControlMessage mine, std::vector<bool>* joined, bool* rebuild,
                  std::vector<std::optional<uint64_t>>* held) {
  const uint32_t n = t->size(), me = t->rank();
  // Owned with the transfers: a handshake cut off may leave them on the wire.
  const auto hello = std::make_shared<Message>();
  EncodeControl(mine, hello->data());
  const auto in_buffer = std::make_shared<std::vector<Message>>(n);
  std::vector<Message>& in = *in_buffer;
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
      std::string text;
      StatusOr<bool> ours = IsFor(in[p], ControlMessage::Kind::kHello, job, p, &says, &text);
      if (!ours.ok()) co_return ours.status();
      if (!*ours) {
        again.push_back(p);
        continue;
      }
      StatusOr<std::optional<uint64_t>> plan = ParsePlanWord(text, p);
      if (!plan.ok()) co_return plan.status();
      (*held)[p] = *plan;
      (*joined)[p] = true;
      *rebuild |= says == kGpuRebuild;
    }
    waiting = std::move(again);
  }
  co_return Status::Ok();
}

// What node 0's READY says of the GPUs: a fresh NCCL id when any node asked for one.
void MakeGpuId(GpuRestart* gpu, ControlMessage* ready) {
  StatusOr<std::string> id = gpu->make_id();
  if (!id.ok()) {
    gpu->error = id.status();
    return;
  }
  gpu->nccl_id = *id;
  ready->cycle = kGpuRebuild;
  ready->text = Hex(*id);
}

// Round 2: READY receives first, so that the drop below cannot take a READY already in.
CommTask SayReady(Transport* t, uint64_t job, ControlMessage mine, bool rebuild, GpuRestart* gpu) {
  const uint32_t n = t->size(), me = t->rank();
  const auto ready = std::make_shared<Message>();
  EncodeControl(mine, ready->data());
  const auto in_buffer = std::make_shared<std::vector<Message>>(n);
  std::vector<Message>& in = *in_buffer;
  std::vector<CommHandle> handles;
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

}  // namespace

CommTask JoinJob(Transport* t, uint64_t job, std::vector<bool>* joined, GpuRestart* gpu, PlanCarry* plan) {
  const uint32_t n = t->size(), me = t->rank();
  joined->assign(n, false);
  (*joined)[me] = true;
  std::vector<std::optional<uint64_t>> held(n);
  const bool holds = plan != nullptr && plan->plan != nullptr;
  if (holds) held[me] = plan->plan->hash;
  const bool rebuild_here = gpu != nullptr && gpu->rebuild;
  bool rebuild = rebuild_here;
  CommTask round = SayHello(t, job, ControlMessage{ControlMessage::Kind::kHello, job, rebuild_here ? kGpuRebuild : 0,
                                                   holds ? PlanWord(plan->plan->hash) : ""},
                            joined, &rebuild, &held);
  if (Status st = co_await Await(&round); !st.ok()) co_return st;

  ControlMessage ready{ControlMessage::Kind::kReady, job, 0, ""};
  if (me == 0 && rebuild && gpu != nullptr && gpu->make_id) MakeGpuId(gpu, &ready);
  round = SayReady(t, job, ready, rebuild, gpu);
  if (Status st = co_await Await(&round); !st.ok()) co_return st;

  // Round 3: the plan to the nodes without it (nothing when no node holds one).
  if (plan == nullptr) co_return Status::Ok();
  const CarryDecision d = DecideCarry(held);
  round = MovePlan(t, kJoinPlanTag, d, plan);
  co_return co_await Await(&round);
}

CommTask SharePlan(Transport* t, uint64_t tag, PlanCarry* plan) {
  const uint32_t n = t->size(), me = t->rank();
  std::vector<std::optional<uint64_t>> held(n);
  if (plan->plan) held[me] = plan->plan->hash;
  // Each node's word (a HELLO's text, in kPlanWordBytes) to every other.
  using Word = std::array<char, kPlanWordBytes>;
  const auto words = std::make_shared<std::vector<Word>>(n);
  Word& mine = (*words)[me];
  mine.fill('\0');
  const std::string word = plan->plan ? PlanWord(plan->plan->hash) : "";
  memcpy(mine.data(), word.data(), word.size());
  CommHandles handles;
  for (uint32_t p = 0; p < n; ++p)
    if (p != me) {
      handles.push_back(t->Recv(p, tag, (*words)[p].data(), kPlanWordBytes, words));
      handles.push_back(t->Send(p, tag, mine.data(), kPlanWordBytes, words));
    }
  if (Status st = co_await Wait(t, std::move(handles)); !st.ok()) co_return st;
  for (uint32_t p = 0; p < n; ++p) {
    if (p == me) continue;
    const Word& in = (*words)[p];
    StatusOr<std::optional<uint64_t>> h = ParsePlanWord(std::string(in.data(), strnlen(in.data(), kPlanWordBytes)), p);
    if (!h.ok()) co_return h.status();
    held[p] = *h;
  }
  const CarryDecision d = DecideCarry(held);
  CommTask move = MovePlan(t, tag + 1, d, plan);
  co_return co_await Await(&move);
}

}  // namespace syncd
