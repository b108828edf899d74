#include "daemon/shm/shared_mapping.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <utility>

namespace syncd {

SharedMapping::~SharedMapping() {
  if (data_ != nullptr) munmap(data_, size_);
  CloseFd();
}

SharedMapping::SharedMapping(SharedMapping&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)), data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

SharedMapping& SharedMapping::operator=(SharedMapping&& o) noexcept {
  std::swap(fd_, o.fd_);  // what this held is released when `o` dies
  std::swap(data_, o.data_);
  std::swap(size_, o.size_);
  return *this;
}

void SharedMapping::CloseFd() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

StatusOr<SharedMapping> SharedMapping::Create(const std::string& name, uint64_t bytes) {
  SharedMapping m;
  m.fd_ = memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (m.fd_ < 0) return ErrnoError("memfd_create(" + name + ")");
  if (ftruncate(m.fd_, off_t(bytes)) != 0) return ErrnoError("ftruncate(" + name + ", " + std::to_string(bytes) + ")");
  if (fcntl(m.fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) return ErrnoError("seal " + name);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, m.fd_, 0);
  if (p == MAP_FAILED) return ErrnoError("mmap(" + name + ")");
  m.data_ = static_cast<char*>(p);
  m.size_ = bytes;
  return m;
}

}  // namespace syncd
