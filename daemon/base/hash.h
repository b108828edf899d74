// Hashes that must come out the same on every daemon of a job (plan hashes, partial rounds'
// initiators): xxHash's XXH3, 64 bits, over explicit bytes. XXH3's output is specified and stable
// across versions, platforms and builds, so daemons of one job always agree.
#ifndef SYNCD_DAEMON_BASE_HASH_H_
#define SYNCD_DAEMON_BASE_HASH_H_

#include <xxhash.h>

#include <cstdint>
#include <string_view>
#include <type_traits>

namespace syncd {

inline uint64_t Hash64(const void* data, size_t bytes, uint64_t seed = 0) {
  return XXH3_64bits_withSeed(data, bytes, seed);
}
inline uint64_t Hash64(std::string_view s, uint64_t seed = 0) { return Hash64(s.data(), s.size(), seed); }

// A hash built field by field (XXH3's streaming state: the same bytes give the same hash however
// they are split into fields).
class Hasher {
 public:
  Hasher() : state_(XXH3_createState()) { XXH3_64bits_reset(state_); }
  ~Hasher() { XXH3_freeState(state_); }
  Hasher(const Hasher&) = delete;
  Hasher& operator=(const Hasher&) = delete;

  Hasher& Add(const void* data, size_t bytes) {
    XXH3_64bits_update(state_, data, bytes);
    return *this;
  }
  template <typename T>
  Hasher& Add(const T& value) {
    static_assert(std::is_trivially_copyable_v<T>);
    return Add(&value, sizeof(T));
  }
  uint64_t Digest() const { return XXH3_64bits_digest(state_); }

 private:
  XXH3_state_t* state_;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_BASE_HASH_H_
