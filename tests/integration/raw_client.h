// Raw protocol access for tests: what a broken or hostile client could send. RawClient attaches
// over the socket and writes ring entries (and GPU descriptors) by hand, without libsyncclient.
#ifndef SYNCD_TESTS_INTEGRATION_RAW_CLIENT_H_
#define SYNCD_TESTS_INTEGRATION_RAW_CLIENT_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "proto/doorbell.h"
#include "proto/shm_abi.h"

namespace syncd::testing {

// A connected socket to the daemon's attach.sock, or -1.
int RawConnect(const std::string& run_dir);
// Sends `req` (with `pass_fd`, when >= 0, as a segment handed back), returns the reply; fds
// receive the segment and node page (or -1).
abi::AttachReply RawAttach(int fd, abi::AttachRequest req, int fds[abi::kAttachFds], int pass_fd = -1);
abi::AttachRequest RawAttachRequest(int rank, int size);

class RawClient {
 public:
  // Attaches as rank 0 of `size` (one node).
  explicit RawClient(const std::string& run_dir, int size = 1);
  // Attaches as global `rank` of `size`, local rank `local_rank` of `local_size`.
  RawClient(const std::string& run_dir, int rank, int size, int local_rank, int local_size);
  ~RawClient();
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  // A well-formed float32 SUM allreduce of 4 elements at arena offset 0, named "raw.<handle>".
  abi::SubmitEntry Valid(uint64_t handle) const;
  void Push(const abi::SubmitEntry& e);
  void Kick();
  // Whether the daemon closed our socket within `timeout_s`.
  bool ClosedByDaemon(double timeout_s);
  // Waits for the completion of `handle`; returns its status and message ({-1, ...}: none came).
  std::pair<int, std::string> Await(uint64_t handle, double timeout_s = 5);
  // Every completion that arrives within `for_s`: handle -> how many times it came (a correct
  // daemon completes each request exactly once), with the last status of each in *status.
  std::map<uint64_t, int> Completions(double for_s, std::map<uint64_t, int>* status = nullptr);
  // Goes away without a word, as a killed process does: the socket closes, the segment unmaps.
  void Vanish();
  abi::SegmentHeader* header() { return h_; }
  uint64_t arena_bytes() const { return h_->arena_bytes; }
  char* arena() { return seg_ + h_->arena_offset; }

 private:
  int fd_ = -1;
  int wake_fd_ = -1;  // the engine's doorbell eventfd
  abi::AttachReply reply_{};
  char* seg_ = nullptr;
  abi::NodePage* node_ = nullptr;
  abi::SegmentHeader* h_ = nullptr;
  abi::RingView<abi::SubmitEntry> submit_;
  abi::RingView<abi::CompletionEntry> done_;
};

}  // namespace syncd::testing

#endif  // SYNCD_TESTS_INTEGRATION_RAW_CLIENT_H_
