#include "tests/integration/raw_client.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "proto/fd_passing.h"
#include "tests/integration/harness.h"

namespace syncd::testing {

int RawConnect(const std::string& run_dir) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  snprintf(addr.sun_path, sizeof(addr.sun_path), "%s/attach.sock", run_dir.c_str());
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

abi::AttachReply RawAttach(int fd, abi::AttachRequest req, int fds[abi::kAttachFds], int pass_fd) {
  if (pass_fd < 0) {
    EXPECT_EQ(send(fd, &req, sizeof(req), 0), ssize_t(sizeof(req)));
  } else {
    EXPECT_EQ(abi::SendWithFd(fd, &req, sizeof(req), pass_fd), ssize_t(sizeof(req)));
  }
  abi::AttachReply reply{};
  EXPECT_EQ(abi::RecvWithFds(fd, &reply, sizeof(reply), MSG_WAITALL, fds, abi::kAttachFds), ssize_t(sizeof(reply)));
  return reply;
}

abi::AttachRequest RawAttachRequest(int rank, int size) {
  return abi::AttachRequest{abi::kMagic, abi::kVersion, rank, size, rank, size, int32_t(getpid()), 0, 0};
}

RawClient::RawClient(const std::string& run_dir, int size) : RawClient(run_dir, 0, size, 0, size) {}

RawClient::RawClient(const std::string& run_dir, int rank, int size, int local_rank, int local_size) {
  fd_ = RawConnect(run_dir);
  int fds[abi::kAttachFds];
  reply_ = RawAttach(fd_, abi::AttachRequest{abi::kMagic, abi::kVersion, rank, size, local_rank, local_size,
                                             int32_t(getpid()), 0, 0},
                     fds);
  EXPECT_EQ(reply_.status, SYNCD_OK) << reply_.message;
  seg_ = static_cast<char*>(mmap(nullptr, reply_.segment_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0));
  node_ = static_cast<abi::NodePage*>(mmap(nullptr, reply_.node_page_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fds[1], 0));
  close(fds[0]);
  close(fds[1]);
  wake_fd_ = fds[2];
  h_ = reinterpret_cast<abi::SegmentHeader*>(seg_);
  submit_ = abi::RingView<abi::SubmitEntry>(&h_->submit, reinterpret_cast<abi::SubmitEntry*>(seg_ + h_->submit_ring_offset),
                                            h_->ring_entries);
  done_ = abi::RingView<abi::CompletionEntry>(
      &h_->completion, reinterpret_cast<abi::CompletionEntry*>(seg_ + h_->completion_ring_offset), h_->ring_entries);
}

RawClient::~RawClient() { Vanish(); }

void RawClient::Vanish() {
  if (seg_ == nullptr) return;
  munmap(seg_, reply_.segment_bytes);
  munmap(node_, reply_.node_page_bytes);
  close(fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
  wake_fd_ = -1;
  seg_ = nullptr;
}

std::map<uint64_t, int> RawClient::Completions(double for_s, std::map<uint64_t, int>* status) {
  std::map<uint64_t, int> seen;
  for (double end = NowS() + for_s; NowS() < end;) {
    if (const abi::CompletionEntry* c = done_.Front()) {
      ++seen[c->handle];
      if (status) (*status)[c->handle] = c->status;
      done_.Pop();
      continue;
    }
    usleep(200);
  }
  return seen;
}

abi::SubmitEntry RawClient::Valid(uint64_t handle) const {
  abi::SubmitEntry e{};
  e.handle = handle;
  e.kind = uint32_t(abi::OpKind::kAllreduce);
  e.dtype = SYNCD_FLOAT32;
  e.op = SYNCD_SUM;
  e.prescale = e.postscale = 1;
  e.ndim = 1;
  e.shape[0] = 4;
  e.bytes = 16;
  snprintf(e.name, sizeof(e.name), "raw.%lu", (unsigned long)handle);
  return e;
}

void RawClient::Push(const abi::SubmitEntry& e) {
  *submit_.Reserve() = e;
  submit_.Publish();
  Kick();
}

void RawClient::Kick() { abi::RingFd(&node_->engine_doorbell, wake_fd_); }

bool RawClient::ClosedByDaemon(double timeout_s) {
  for (double end = NowS() + timeout_s; NowS() < end;) {
    char b;
    const ssize_t r = recv(fd_, &b, 1, MSG_DONTWAIT);
    if (r == 0) return true;
    usleep(1000);
  }
  return false;
}

std::pair<int, std::string> RawClient::Await(uint64_t handle, double timeout_s) {
  for (double end = NowS() + timeout_s; NowS() < end;) {
    if (const abi::CompletionEntry* c = done_.Front()) {
      const uint32_t idx = done_.FrontIndex() & (done_.capacity() - 1);
      std::pair<int, std::string> r{c->status,
                                    std::string(seg_ + h_->message_offset + idx * abi::kMessageBytes, c->message_bytes)};
      const uint64_t got = c->handle;
      done_.Pop();
      if (got == handle) return r;
    }
    usleep(100);
  }
  return {-1, "no completion"};
}

}  // namespace syncd::testing
