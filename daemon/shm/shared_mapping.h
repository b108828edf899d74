// An anonymous shared-memory file (memfd) and its mapping in this process. Move-only; unmaps and
// closes on destruction. The fd is what the attach handshake passes to a client.
#ifndef SYNCD_DAEMON_SHM_SHARED_MAPPING_H_
#define SYNCD_DAEMON_SHM_SHARED_MAPPING_H_

#include <cstdint>
#include <string>

#include "daemon/base/status.h"

namespace syncd {

class SharedMapping {
 public:
  SharedMapping() = default;
  ~SharedMapping();
  SharedMapping(SharedMapping&& other) noexcept;
  SharedMapping& operator=(SharedMapping&& other) noexcept;

  // A zero-filled mapping of `bytes` (pages are allocated on first touch). The file is sealed
  // against resizing so a client cannot shrink it under the daemon.
  static StatusOr<SharedMapping> Create(const std::string& name, uint64_t bytes);
  // Maps `fd` (taken over: closed on failure too), a file Create made, as another process handed
  // it back: it must be a memfd of exactly `bytes`, sealed against resizing (so it cannot shrink
  // under this process).
  static StatusOr<SharedMapping> Adopt(int fd, uint64_t bytes);

  char* data() const { return data_; }
  uint64_t size() const { return size_; }
  int fd() const { return fd_; }
  // Closes the fd once it has been passed on; the mapping stays.
  void CloseFd();

 private:
  int fd_ = -1;
  char* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_SHM_SHARED_MAPPING_H_
