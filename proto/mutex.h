// A mutex clang's thread-safety analysis understands (-Wthread-safety; libstdc++'s std::mutex
// carries no annotations), and the annotations for what it guards, for the daemon and the client
// library alike. State shared between threads is SYNCD_GUARDED_BY its mutex; functions that
// expect it held say SYNCD_REQUIRES.
//
//   Mutex mu_;
//   std::string why_ SYNCD_GUARDED_BY(mu_);
//   { MutexLock lock(&mu_); why_ = "..."; }
//
// Other compilers see plain std::mutex code.
#ifndef SYNCD_PROTO_MUTEX_H_
#define SYNCD_PROTO_MUTEX_H_

#include <mutex>

#if defined(__clang__)
#define SYNCD_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define SYNCD_THREAD_ANNOTATION(x)
#endif

#define SYNCD_CAPABILITY(x) SYNCD_THREAD_ANNOTATION(capability(x))
#define SYNCD_SCOPED_CAPABILITY SYNCD_THREAD_ANNOTATION(scoped_lockable)
#define SYNCD_GUARDED_BY(x) SYNCD_THREAD_ANNOTATION(guarded_by(x))
#define SYNCD_PT_GUARDED_BY(x) SYNCD_THREAD_ANNOTATION(pt_guarded_by(x))
#define SYNCD_REQUIRES(...) SYNCD_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define SYNCD_EXCLUDES(...) SYNCD_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define SYNCD_ACQUIRE(...) SYNCD_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define SYNCD_RELEASE(...) SYNCD_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
// For code that reads guarded state on purpose without the lock (atomics inside it), saying why.
#define SYNCD_NO_THREAD_SAFETY_ANALYSIS SYNCD_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace syncd {

// Also BasicLockable (lock/unlock), for std::condition_variable_any.
class SYNCD_CAPABILITY("mutex") Mutex {
 public:
  void lock() SYNCD_ACQUIRE() { mu_.lock(); }
  void unlock() SYNCD_RELEASE() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

class SYNCD_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) SYNCD_ACQUIRE(mu) : mu_(mu) { mu_->lock(); }
  ~MutexLock() SYNCD_RELEASE() { mu_->unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* mu_;
};

}  // namespace syncd

#endif  // SYNCD_PROTO_MUTEX_H_
