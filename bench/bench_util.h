// What every syncd-bench workload shares: a clock and dying with the client's last error.
#ifndef SYNCD_BENCH_BENCH_UTIL_H_
#define SYNCD_BENCH_BENCH_UTIL_H_

#include <syncd/client.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace syncd::bench {

inline double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

[[noreturn]] inline void Die(const std::string& what) {
  fprintf(stderr, "syncd-bench: %s: %s\n", what.c_str(), syncd_last_error());
  exit(1);
}

inline void Check(int rc, const std::string& what) {
  if (rc != SYNCD_OK) Die(what);
}

// One allreduce of `count` elements at `data`, waited for; dies naming `name` where it fails.
inline void Allreduce(syncd_client* c, const char* name, void* data, int64_t count, syncd_dtype dtype, syncd_reduce_op op) {
  syncd_tensor t{name, data, dtype, 1, &count, 0};
  syncd_handle h;
  Check(syncd_allreduce_async(c, &t, op, 1.0, 1.0, &h), name);
  Check(syncd_wait(c, h, -1), name);
}

}  // namespace syncd::bench

#endif  // SYNCD_BENCH_BENCH_UTIL_H_
