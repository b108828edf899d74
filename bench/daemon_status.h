// What a rank's own daemon reports: its status (`syncctl status --json`, read by one rank per
// daemon) and fields summed out of it. Shared by the benchmarks that count the daemon's work.
#ifndef SYNCD_BENCH_DAEMON_STATUS_H_
#define SYNCD_BENCH_DAEMON_STATUS_H_

#include <cstddef>
#include <string>

namespace syncd::bench {

// The status of this rank's daemon (SYNCD_RUN_DIR) as JSON, from `syncctl` at that path; dies
// where it gives none.
std::string ReadDaemonStatus(const std::string& syncctl);

// The sum of every `"key": N` (or "N": uint64 fields are strings in proto3 JSON) in `json` from
// `from` on.
double SumField(const std::string& json, const std::string& key, size_t from = 0);

// syncctl beside this program (argv[0]'s directory), or on PATH.
std::string SyncctlBeside(const std::string& argv0);

}  // namespace syncd::bench

#endif  // SYNCD_BENCH_DAEMON_STATUS_H_
