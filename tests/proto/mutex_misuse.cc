// Not built: tests/CMakeLists.txt compiles this file with clang's -Wthread-safety
// -Werror=thread-safety and expects it to FAIL (proto/mutex.h's annotations reach the
// analysis). With SYNCD_MUTEX_USED_RIGHT defined it must compile.
#include "proto/mutex.h"

#include <string>

namespace syncd {

class Shared {
 public:
  void Set(const std::string& v) {
#ifdef SYNCD_MUTEX_USED_RIGHT
    MutexLock lock(&mu_);
#endif
    value_ = v;  // without the lock: "writing variable 'value_' requires holding mutex 'mu_'"
  }

 private:
  Mutex mu_;
  std::string value_ SYNCD_GUARDED_BY(mu_);
};

void Use() { Shared().Set("x"); }

}  // namespace syncd
