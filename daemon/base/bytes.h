// Little-endian byte encodings the daemons exchange (plans, graphs): a writer that appends
// fixed-size values and bytes, and a reader that trusts nothing (every Get says whether the
// bytes held it).
#ifndef SYNCD_DAEMON_BASE_BYTES_H_
#define SYNCD_DAEMON_BASE_BYTES_H_

#include <cstddef>
#include <cstring>
#include <string>
#include <type_traits>

namespace syncd {

class ByteWriter {
 public:
  template <typename T>
  void Put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  void Bytes(const std::string& s) { out_ += s; }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

class ByteReader {
 public:
  ByteReader(const char* p, size_t n) : p_(p), end_(p + n) {}
  template <typename T>
  bool Get(T* v) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (left() < sizeof(T)) return false;
    memcpy(v, p_, sizeof(T));
    p_ += sizeof(T);
    return true;
  }
  // `n` bytes as text.
  bool Text(size_t n, std::string* out) {
    if (left() < n) return false;
    out->assign(p_, n);
    p_ += n;
    return true;
  }
  size_t left() const { return size_t(end_ - p_); }

 private:
  const char* p_;
  const char* end_;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_BASE_BYTES_H_
