#include "daemon/shm/shared_mapping.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
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

StatusOr<SharedMapping> SharedMapping::Adopt(int fd, uint64_t bytes) {
  SharedMapping m;
  m.fd_ = fd;
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0) return ErrnoError("the descriptor is not a sealed shared-memory file (F_GET_SEALS)");
  if ((seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW))
    return Status(SYNCD_ERR_INVALID, "the shared-memory file is not sealed against resizing");
  struct stat st{};
  if (fstat(fd, &st) != 0) return ErrnoError("fstat");
  if (uint64_t(st.st_size) != bytes)
    return Status(SYNCD_ERR_INVALID, "the shared-memory file holds " + std::to_string(st.st_size) + " bytes, not " +
                                         std::to_string(bytes));
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return ErrnoError("mmap");
  m.data_ = static_cast<char*>(p);
  m.size_ = bytes;
  return m;
}

}  // namespace syncd
