// Spent requests kept for their heap storage: the next request read off a ring is built in one,
// so a name seen before (longer than the string's inline 15 bytes), a shape of more than 4
// dimensions or alltoall splits cost no allocation. Everything else a spent request held (its
// client's segment, result area, plan) is let go when it is given back, as if it were destroyed.
//
// Engine thread only.
#ifndef SYNCD_DAEMON_CORE_REQUEST_POOL_H_
#define SYNCD_DAEMON_CORE_REQUEST_POOL_H_

#include <string>
#include <utility>
#include <vector>

#include "daemon/core/request.h"

namespace syncd {

class RequestPool {
 public:
  RequestPool() { spare_.reserve(kMaxSpare); }

  // A default request, with storage of a spent one when there is one.
  Request Take() {
    if (spare_.empty()) return Request{};
    Request r = std::move(spare_.back());
    spare_.pop_back();
    return r;
  }
  // `r` is done with (completed, or never to be): kept for its storage, up to kMaxSpare.
  void Give(Request&& r) {
    if (spare_.size() >= kMaxSpare || r.name.capacity() <= kInlineName) return;
    std::string name = std::move(r.name);
    Shape shape = std::move(r.shape);
    std::vector<int64_t> splits = std::move(r.splits);
    r = Request{};
    name.clear();
    shape.clear();
    splits.clear();
    r.name = std::move(name);
    r.shape = std::move(shape);
    r.splits = std::move(splits);
    spare_.push_back(std::move(r));
  }
  size_t spare() const { return spare_.size(); }

 private:
  static constexpr size_t kMaxSpare = 256;
  static constexpr size_t kInlineName = 15;  // what std::string holds without the heap
  std::vector<Request> spare_;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_CORE_REQUEST_POOL_H_
