// A node service's registered jobs kept on disk, so that its daemon restarted under them
// (systemd's Restart=, with RuntimeDirectoryPreserve=restart) takes every one back: one file per
// job, <run dir>/jobs/<id>, the job's registration as it was asked for (its token included: the
// directory is the daemon user's alone, 0700, each file 0600). The run directory is under /run:
// a reboot forgets them, as it ends the jobs.
//
// Threads: any; each call reads or writes whole files (a file is written aside and renamed).
#ifndef SYNCD_DAEMON_CONTROL_JOB_STORE_H_
#define SYNCD_DAEMON_CONTROL_JOB_STORE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/base/status.h"
#include "syncd.pb.h"

namespace syncd {

class JobStore {
 public:
  // Keeps the jobs under `run_dir`/jobs ("" keeps nothing).
  explicit JobStore(std::string run_dir);
  Status Save(const control::RegisteredJob& job) const;
  void Forget(uint64_t job) const;
  // Every job kept, by id; a file that cannot be read is named in `*unreadable` and removed.
  std::vector<control::RegisteredJob> Load(std::vector<std::string>* unreadable) const;

 private:
  std::string PathOf(uint64_t job) const;
  const std::string dir_;
};

}  // namespace syncd

#endif  // SYNCD_DAEMON_CONTROL_JOB_STORE_H_
