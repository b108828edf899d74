#include "daemon/transport/ucx/ucx_transport.h"

#include <poll.h>
#include <ucs/config/global_opts.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "proto/doorbell.h"

namespace syncd {
namespace {

// A message's UCX tag: source rank, epoch, tag (12, 4 and 48 bits).
constexpr uint32_t kSourceShift = 48 + kEpochBits;
constexpr uint64_t kEpochTagMask = uint64_t(kEpochMask) << 48;

void SendDone(void* request, ucs_status_t status, void* user_data) {
  auto* s = static_cast<UcxTransport::Slot*>(user_data);
  ucp_request_free(request);
  s->request = nullptr;
  s->owner->Finish(s, status, s->expected);
}

void RecvDone(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user_data) {
  auto* s = static_cast<UcxTransport::Slot*>(user_data);
  ucp_request_free(request);
  s->request = nullptr;
  s->owner->Finish(s, status, status == UCS_OK ? info->length : 0);
}

void PeerError(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* p = static_cast<UcxTransport::PeerContext*>(arg);
  if (!p->owner->IsCurrentEndpoint(p->peer, ep)) return;  // one Reconnect closed: not the live peer's
  p->owner->OnPeerError(p->peer, ucs_status_string(status));
}

Status UcxError(const std::string& what, ucs_status_t st) {
  return Status(SYNCD_ERR_SYSTEM, what + ": " + ucs_status_string(st));
}

}  // namespace

uint64_t UcxTransport::WireTag(uint32_t src, uint64_t tag) const {
  return (uint64_t(src) << kSourceShift) | (uint64_t(epoch_) << 48) | (tag & kTagMask);
}

StatusOr<std::unique_ptr<UcxTransport>> UcxTransport::Create(uint32_t rank, uint32_t size, UcxOptions options) {
  if (size > kMaxTransportRanks)
    return InvalidArgument("UCX transport: " + std::to_string(size) + " nodes, at most " +
                           std::to_string(kMaxTransportRanks) + " fit in a message tag");
  // When a job's daemons stop, messages of a last cycle may still be on their way; UCX warns
  // about each one. Keep its log to errors unless the user chose a level. Once, by the first
  // transport made: a node service makes jobs' links on several threads at once (restored jobs;
  // ThreadSanitizer saw two write UCX's global options), before any UCX use reads them.
  static const bool quiet = [] {
    if (getenv("UCX_LOG_LEVEL") == nullptr) ucs_global_opts.log_component.log_level = UCS_LOG_LEVEL_ERROR;
    return true;
  }();
  (void)quiet;
  std::unique_ptr<UcxTransport> t(new UcxTransport(rank, size));
  t->options_ = options;
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) return UcxError("ucp_config_read", st);
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  // WAKEUP: a worker whose event descriptor a blocked engine sleeps on (WaitForEvent).
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  st = ucp_init(&params, config, &t->context_);
  ucp_config_release(config);
  if (st != UCS_OK) return UcxError("ucp_init", st);
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  st = ucp_worker_create(t->context_, &wp, &t->worker_);
  if (st != UCS_OK) return UcxError("ucp_worker_create", st);
  ucp_address_t* addr = nullptr;
  size_t len = 0;
  st = ucp_worker_get_address(t->worker_, &addr, &len);
  if (st != UCS_OK) return UcxError("ucp_worker_get_address", st);
  t->address_.assign(reinterpret_cast<const char*>(addr), len);
  // Without an event descriptor (a transport that cannot signal) WaitForEvent polls instead.
  if (ucp_worker_get_efd(t->worker_, &t->efd_) != UCS_OK) t->efd_ = -1;
  ucp_worker_release_address(t->worker_, addr);
  t->peer_lost_.assign(size, false);
  t->no_shared_memory_.assign(size, false);
  t->peer_why_.assign(size, Status::Ok());
  return t;
}

Status UcxTransport::Connect(const std::vector<std::string>& addresses, const std::vector<int32_t>& same_host_pids) {
  if (addresses.size() != size_)
    return InvalidArgument("UCX connect: " + std::to_string(addresses.size()) + " addresses for " +
                           std::to_string(size_) + " nodes");
  eps_.assign(size_, nullptr);
  detection_.assign(size_, 0);
  for (uint32_t p = 0; p < size_; ++p)
    if (p != rank_)
      SYNCD_RETURN_IF_ERROR(ConnectPeer(p, addresses[p], p < same_host_pids.size() ? same_host_pids[p] : 0));
  return Status::Ok();
}

Status UcxTransport::ConnectPeer(uint32_t p, const std::string& address, int32_t same_host_pid) {
  // A daemon on this host that we can watch directly does not need UCX's error handling,
  // which would rule out shared memory (unless shared memory is ruled out anyway).
  const bool watched = options_.detect_peer_failure && !options_.peer_errors_everywhere && same_host_pid > 0 &&
                       watch_.Watch(p, same_host_pid);
  const bool ucx_errors =
      no_shared_memory_[p] || (options_.detect_peer_failure && (!watched || !options_.same_host_shared_memory));
  detection_[p] = uint8_t((watched ? 2 : 0) | (ucx_errors ? 1 : 0));
  peer_contexts_.push_back(std::make_unique<PeerContext>(PeerContext{this, p}));
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.address = reinterpret_cast<const ucp_address_t*>(address.data());
  ep.err_mode = ucx_errors ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
  ep.err_handler.cb = PeerError;
  ep.err_handler.arg = peer_contexts_.back().get();
  ucs_status_t st = ucp_ep_create(worker_, &ep, &eps_[p]);
  if (st != UCS_OK) return UcxError("ucp_ep_create to node " + std::to_string(p), st);
  return Status::Ok();
}

Status UcxTransport::Reconnect(uint32_t peer, const std::string& address, int32_t same_host_pid, uint32_t keep_slot) {
  if (peer >= size_ || peer == rank_ || eps_.empty())
    return InvalidArgument("reconnect to node " + std::to_string(peer) + ": not a peer of node " +
                           std::to_string(rank_));
  if (!peer_lost_[peer])
    return Status(SYNCD_ERR_INVALID, "reconnect to node " + std::to_string(peer) + ": it was not lost");
  // The old process may have died writing into this node's shared-memory FIFO, which then
  // delivers nothing more: the new one is reached (and reaches this node) over TCP.
  if (detection_[peer] == 2) AvoidSharedMemoryWith(peer);
  // What was posted for the old process ends (its owners saw the loss already).
  for (Slot& s : slots_)
    if (s.in_use && s.peer == peer && s.request != nullptr) {
      s.orphaned = true;
      ucp_request_cancel(worker_, s.request);
    }
  if (eps_[peer] != nullptr) {
    // The old process is gone: nothing to wait for but UCX's own bookkeeping.
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void* r = ucp_ep_close_nbx(eps_[peer], &param);
    eps_[peer] = nullptr;
    if (r != nullptr && !UCS_PTR_IS_ERR(r)) {
      while (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_worker_progress(worker_);
      ucp_request_free(r);
    }
  }
  // Its PeerContext stays: a late error callback of the closed endpoint must find it (and is
  // ignored: PeerError checks the endpoint it came from).
  watch_.Forget(peer);
  ucp_worker_progress(worker_);
  const uint64_t source_and_slot = (uint64_t{0xfff} << kSourceShift) | kSetSlotMask;
  for (uint64_t slot = 0; slot <= kSetSlotMask >> kSetSlotShift; ++slot)
    if (slot != keep_slot)
      while (DiscardOne((uint64_t(peer) << kSourceShift) | (slot << kSetSlotShift), source_and_slot)) {
      }
  peer_lost_[peer] = false;
  peer_failure_.reset();
  for (uint32_t p = 0; p < size_ && !peer_failure_; ++p)
    if (peer_lost_[p]) peer_failure_ = peer_why_[p];
  return ConnectPeer(peer, address, same_host_pid);
}

void UcxTransport::AvoidSharedMemoryWith(uint32_t peer) {
  if (peer < no_shared_memory_.size()) no_shared_memory_[peer] = true;
}

void UcxTransport::StartClose() {
  if (closing_started_) return;
  closing_started_ = true;
  // Withdraw what is still posted, then close endpoints (forcibly when a peer is gone).
  std::vector<bool> outstanding(eps_.size(), false);
  force_closed_.assign(eps_.size(), false);
  for (Slot& s : slots_)
    if (s.request != nullptr) {
      ucp_request_cancel(worker_, s.request);
      if (!s.is_recv && s.peer < outstanding.size()) outstanding[s.peer] = true;
    }
  for (uint32_t p = 0; p < eps_.size(); ++p) {
    if (eps_[p] == nullptr) continue;
    // A send the peer never took (its job was aborted before it posted the receive) would keep
    // a graceful close waiting forever: where UCX error handling is on, close such an
    // endpoint at once; the peer sees this node gone, which it is.
    const bool force = peer_lost_[p] || (outstanding[p] && (detection_[p] & 1) != 0);
    if (force) force_closed_[p] = true;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    void* r = ucp_ep_close_nbx(eps_[p], &param);
    eps_[p] = nullptr;
    if (r != nullptr && !UCS_PTR_IS_ERR(r)) closing_.push_back(r);
  }
}

bool UcxTransport::CloseDone() {
  ucp_worker_progress(worker_);
  std::vector<void*> still;
  for (void* r : closing_) {
    if (ucp_request_check_status(r) == UCS_INPROGRESS) still.push_back(r);
    else ucp_request_free(r);
  }
  closing_ = std::move(still);
  return closing_.empty();
}

void UcxTransport::CheckWatchedPeers() {
  while (std::optional<uint32_t> dead = watch_.Exited())
    if (!peer_lost_[*dead]) OnPeerError(*dead, "its daemon, pid " + std::to_string(watch_.pid_of(*dead)) + ", exited");
}

bool UcxTransport::SendsOutstanding() const {
  for (const Slot& s : slots_)
    if (s.request != nullptr && !s.is_recv) return true;
  return false;
}

UcxTransport::~UcxTransport() {
  if (worker_ != nullptr) {
    CheckWatchedPeers();  // a peer gone since the last Progress() is closed as lost
    // A send an aborted job left waits for its peer to take it. A peer that closes too drops
    // what it has (DiscardOne) while it waits here: a moment lets both finish such sends, so
    // that the endpoints close cleanly and the worker can be destroyed.
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
    while (SendsOutstanding() && std::chrono::steady_clock::now() < until) DiscardArrived();
    StartClose();
  }
  // A peer that does not answer the close handshake (gone, or not progressing) is not waited for long.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  while (worker_ != nullptr && !CloseDone() && std::chrono::steady_clock::now() < deadline) DiscardArrived();
  for (void* r : closing_) {
    ucp_request_cancel(worker_, r);
    ucp_request_free(r);
  }
  if (worker_ != nullptr) {
    for (int i = 0; i < 100 && ucp_worker_progress(worker_) > 0; ++i) {}
    ucp_worker_destroy(worker_);
  }
  if (context_ != nullptr) ucp_cleanup(context_);
}

void UcxTransport::OnPeerError(uint32_t peer, const std::string& why) {
  if (peer_lost_[peer]) return;
  peer_lost_[peer] = true;
  peer_why_[peer] = Status(SYNCD_ERR_RANK_LOST, "lost node " + std::to_string(peer) + " (" + why + ")");
  if (!peer_failure_) peer_failure_ = peer_why_[peer];
}

const char* UcxTransport::failure_detection(uint32_t peer) const {
  if (peer >= detection_.size()) return "none";
  static const char* const kNames[] = {"none", "ucx", "pidfd", "pidfd+ucx"};
  return kNames[detection_[peer] & 3];
}

std::string UcxTransport::endpoint_info(uint32_t peer) const {
  if (peer >= eps_.size() || eps_[peer] == nullptr) return "";
  char* text = nullptr;
  size_t size = 0;
  FILE* f = open_memstream(&text, &size);
  if (f == nullptr) return "";
  ucp_ep_print_info(eps_[peer], f);
  fclose(f);
  std::string out(text, size);
  free(text);
  return out;
}

std::pair<CommHandle, UcxTransport::Slot*> UcxTransport::NewSlot(bool is_recv, uint32_t peer, size_t bytes,
                                                                  BufferOwner buffer) {
  uint32_t idx;
  if (!free_slots_.empty()) {
    idx = free_slots_.back();
    free_slots_.pop_back();
  } else {
    idx = uint32_t(slots_.size());
    slots_.emplace_back();
  }
  Slot& s = slots_[idx];
  s.owner = this;
  s.index = idx;
  s.generation++;
  s.in_use = true;
  s.orphaned = false;
  s.is_recv = is_recv;
  s.peer = peer;
  s.expected = bytes;
  s.request = nullptr;
  s.buffer = std::move(buffer);
  s.state = CommState::kPending;
  s.error = Status::Ok();
  return {(uint64_t(s.generation) << 32) | idx, &s};
}

UcxTransport::Slot* UcxTransport::Lookup(CommHandle h) {
  const uint32_t idx = uint32_t(h);
  if (idx >= slots_.size()) return nullptr;
  Slot& s = slots_[idx];
  return (s.in_use && !s.orphaned && s.generation == uint32_t(h >> 32)) ? &s : nullptr;
}

void UcxTransport::Release(Slot* s) {
  s->in_use = false;
  s->request = nullptr;
  s->buffer.reset();
  free_slots_.push_back(s->index);
}

void UcxTransport::Finish(Slot* s, ucs_status_t status, size_t received) {
  if (s->orphaned) {
    Release(s);
    return;
  }
  if (status != UCS_OK) {
    // A transfer that failed because its peer cannot be reached is the loss of that peer,
    // whichever of UCX's two reports comes first: this completion or the endpoint's error
    // handler (under load the completion can win, and the job would end with a bare SYSTEM
    // error instead of naming the lost node).
    if (status == UCS_ERR_ENDPOINT_TIMEOUT || status == UCS_ERR_CONNECTION_RESET || status == UCS_ERR_UNREACHABLE ||
        status == UCS_ERR_NOT_CONNECTED)
      OnPeerError(s->peer, ucs_status_string(status));
    s->state = CommState::kFailed;
    s->error = peer_lost_[s->peer] ? *peer_failure_
                                   : Status(SYNCD_ERR_SYSTEM, std::string(s->is_recv ? "receive from" : "send to") +
                                                                  " node " + std::to_string(s->peer) + ": " +
                                                                  ucs_status_string(status));
  } else if (s->is_recv && received != s->expected) {
    s->state = CommState::kFailed;
    s->error = Status(SYNCD_ERR_PROTOCOL, "message from node " + std::to_string(s->peer) + " has " +
                                              std::to_string(received) + " bytes, expected " +
                                              std::to_string(s->expected));
  } else {
    s->state = CommState::kDone;
  }
}

CommHandle UcxTransport::Failed(Slot* s, CommHandle h, Status error) {
  s->state = CommState::kFailed;
  s->error = std::move(error);
  return h;
}

CommHandle UcxTransport::Send(uint32_t peer, uint64_t tag, const void* data, size_t bytes, BufferOwner owner) {
  auto [h, s] = NewSlot(false, peer, bytes, std::move(owner));
  if (peer >= size_ || peer == rank_ || eps_.empty() || eps_[peer] == nullptr)
    return Failed(s, h, InvalidArgument("send to node " + std::to_string(peer) + ": no endpoint"));
  if (peer_lost_[peer]) return Failed(s, h, *peer_failure_);
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.send = SendDone;
  p.user_data = s;
  ucs_status_ptr_t r = ucp_tag_send_nbx(eps_[peer], data, bytes, WireTag(rank_, tag), &p);
  if (!UCS_PTR_IS_ERR(r)) {
    bytes_sent_ += bytes;
    ++messages_sent_;
  }
  if (r == nullptr) {
    s->state = CommState::kDone;
  } else if (UCS_PTR_IS_ERR(r)) {
    Finish(s, UCS_PTR_STATUS(r), 0);
  } else if (s->state == CommState::kPending) {
    s->request = r;  // else the callback already ran (and freed r)
  }
  return h;
}

CommHandle UcxTransport::Recv(uint32_t peer, uint64_t tag, void* data, size_t bytes, BufferOwner owner) {
  auto [h, s] = NewSlot(true, peer, bytes, std::move(owner));
  if (peer >= size_ || peer == rank_) return Failed(s, h, InvalidArgument("receive from node " + std::to_string(peer)));
  if (peer_lost_[peer]) return Failed(s, h, *peer_failure_);
  // UCX 1.13 leaves recv_info unfilled when a receive completes immediately, so the size check
  // would see 0 bytes: always complete through the callback, which reports the real length.
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  p.cb.recv = RecvDone;
  p.user_data = s;
  ucs_status_ptr_t r = ucp_tag_recv_nbx(worker_, data, bytes, WireTag(peer, tag), ~uint64_t{0}, &p);
  if (r == nullptr) {
    Finish(s, UCS_ERR_INVALID_PARAM, 0);  // not expected with NO_IMM_CMPL
  } else if (UCS_PTR_IS_ERR(r)) {
    Finish(s, UCS_PTR_STATUS(r), 0);
  } else if (s->state == CommState::kPending) {
    // A message that had already arrived completes inside ucp_tag_recv_nbx: the callback has
    // run and freed r by now, and r must not be kept (cancelling it later corrupts UCX's pool).
    s->request = r;
  }
  return h;
}

bool UcxTransport::Progress() {
  const bool did = ucp_worker_progress(worker_) > 0;
  // Same-host peers watched through pidfds: look at most once a millisecond (a poll(2) call).
  const uint64_t now = abi::MonotonicNs();
  if (now >= next_watch_check_ns_) {
    next_watch_check_ns_ = now + 1'000'000;
    CheckWatchedPeers();
  }
  return did;
}

Transport::Arm UcxTransport::ArmForSleep(std::vector<pollfd>* fds) {
  if (efd_ < 0) return Arm::kCannot;
  // Arm only with nothing left to progress (UCX's rule); BUSY: events came in meanwhile.
  while (ucp_worker_progress(worker_) > 0) {
  }
  const ucs_status_t st = ucp_worker_arm(worker_);
  if (st == UCS_ERR_BUSY) return Arm::kBusy;
  if (st != UCS_OK) return Arm::kCannot;
  // The watched peers' pidfds are in the set too: a daemon that exits ends the sleep.
  fds->push_back(pollfd{efd_, POLLIN, 0});
  watch_.AppendFds(fds);
  return Arm::kArmed;
}

void UcxTransport::Woken(const pollfd* fds, size_t n) {
  for (size_t i = 1; i < n; ++i)
    if (fds[i].revents != 0) next_watch_check_ns_ = 0;  // Progress() looks at once
}

CommState UcxTransport::Test(CommHandle h, Status* error) {
  Slot* s = Lookup(h);
  if (s == nullptr) {
    *error = Status(SYNCD_ERR_INTERNAL, "unknown transport handle");
    return CommState::kFailed;
  }
  if (s->state == CommState::kPending && s->is_recv && peer_lost_[s->peer]) {
    // A receive is posted on the worker, not the endpoint: UCX does not fail it for us.
    *error = *peer_failure_;
    Cancel(h);
    return CommState::kFailed;
  }
  const CommState state = s->state;
  if (state == CommState::kPending) return state;
  if (state == CommState::kFailed) *error = s->error;
  Release(s);
  return state;
}

void UcxTransport::SetEpoch(uint32_t epoch) {
  epoch_ = epoch & kEpochMask;
  ucp_worker_progress(worker_);
  for (uint32_t e = 0; e <= kEpochMask; ++e)
    if (e != epoch_)
      while (DiscardOne(uint64_t(e) << 48, kEpochTagMask)) {
      }
}

void UcxTransport::DiscardArrived() {
  ucp_worker_progress(worker_);
  while (DiscardOne(0, 0)) {
  }
}

bool UcxTransport::DiscardOne(uint64_t tag, uint64_t mask) {
  ucp_tag_recv_info_t info{};
  ucp_tag_message_h msg = ucp_tag_probe_nb(worker_, tag, mask, 1, &info);
  if (msg == nullptr) return false;
  // Received into a sink the slot owns. A large message comes in pieces (rendezvous) and only
  // as fast as its sender progresses: nothing waits for it here, the slot lets go when it is in.
  const auto sink = std::make_shared<std::vector<char>>(std::max<size_t>(info.length, 1));
  auto [h, s] = NewSlot(true, uint32_t(info.sender_tag >> kSourceShift), info.length, sink);
  s->orphaned = true;
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.recv = RecvDone;
  p.user_data = s;
  ucs_status_ptr_t r = ucp_tag_msg_recv_nbx(worker_, sink->data(), info.length, msg, &p);
  if (!s->in_use) return true;  // the callback ran inside ucp_tag_msg_recv_nbx and released the slot
  if (r == nullptr || UCS_PTR_IS_ERR(r)) Release(s);
  else s->request = r;
  return true;
}

size_t UcxTransport::requests_in_flight() const {
  size_t n = 0;
  for (const Slot& s : slots_) n += s.request != nullptr;
  return n;
}

void UcxTransport::Cancel(CommHandle h) {
  Slot* s = Lookup(h);
  if (s == nullptr) return;
  if (s->request == nullptr) {
    Release(s);
    return;
  }
  // UCX withdraws a receive it has not matched yet (the callback comes with UCS_ERR_CANCELED);
  // one it has matched, and any send, completes when the data has moved. Until the callback,
  // the slot keeps the buffer's owner.
  s->orphaned = true;  // the callback releases it
  ucp_request_cancel(worker_, s->request);
}

}  // namespace syncd
