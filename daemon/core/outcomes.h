// What finished, and how: each tensor's requests with the status they complete with (its text
// names the tensor). Everything below the engine that ends a request (a group run, GPU work
// done, a partial round, a transfer, a failure by reach) adds it here and returns; the engine
// applies the list in one place (Engine::Settle: the ledger, the counters and the timeline, the
// client's ring, the request's storage back to the pool) after every call into the job, and
// nothing below it completes anything or calls up to do so.
//
// Add takes the caller's requests and leaves it the (emptied) storage of an outcome applied
// before, so that a turn's lists circulate between the tensor table, the runs and this list
// without a heap allocation once the first turns have grown them.
//
// Engine thread only.
#ifndef SYNCD_DAEMON_CORE_OUTCOMES_H_
#define SYNCD_DAEMON_CORE_OUTCOMES_H_

#include <cstddef>
#include <utility>
#include <vector>

#include "daemon/core/request.h"
#include "daemon/core/request_pool.h"
#include "daemon/base/status.h"

namespace syncd {

struct Outcome {
  std::vector<Request> requests;  // one tensor's (or one request's)
  Status status;
};

class Outcomes {
 public:
  // `requests` complete with `status`: taken; `requests` is left empty (with spare storage).
  void Add(std::vector<Request>& requests, Status status) {
    if (requests.empty()) return;
    Outcome& o = Next();
    o.requests.swap(requests);
    requests.clear();
    o.status = std::move(status);
  }
  void Add(std::vector<Request>&& requests, Status status) { Add(requests, std::move(status)); }
  void Add(Request r, Status status) {
    Outcome& o = Next();
    o.requests.push_back(std::move(r));
    o.status = std::move(status);
  }

  bool empty() const { return size_ == 0; }
  size_t count() const { return size_; }
  Outcome* begin() { return list_.data(); }
  Outcome* end() { return list_.data() + size_; }

  // Applied: the requests go to `pool` for their storage (nullptr: destroyed), the lists stay
  // for the next outcomes.
  void Clear(RequestPool* pool) {
    for (size_t i = 0; i < size_; ++i) {
      Outcome& o = list_[i];
      if (pool != nullptr)
        for (Request& r : o.requests) pool->Give(std::move(r));
      o.requests.clear();
      o.status = Status::Ok();
    }
    size_ = 0;
  }

 private:
  Outcome& Next() {
    if (size_ == list_.size()) list_.emplace_back();
    return list_[size_++];
  }

  std::vector<Outcome> list_;  // [0, size_) to apply; the rest spare, their lists empty
  size_t size_ = 0;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_CORE_OUTCOMES_H_
