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

}  // namespace syncd::bench

#endif  // SYNCD_BENCH_BENCH_UTIL_H_
