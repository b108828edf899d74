// A node service's registered jobs on disk (job_store.h).
#include "daemon/control/job_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace syncd {

JobStore::JobStore(std::string run_dir) : dir_(run_dir.empty() ? "" : run_dir + "/jobs") {}

std::string JobStore::PathOf(uint64_t job) const { return dir_ + "/" + std::to_string(job); }

Status JobStore::Save(const control::RegisteredJob& job) const {
  if (dir_.empty()) return Status::Ok();
  if (mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoError("mkdir " + dir_);
  if (chmod(dir_.c_str(), 0700) != 0) return ErrnoError("chmod " + dir_);
  const std::string path = PathOf(job.job()), tmp = path + ".tmp";
  std::string bytes;
  if (!job.SerializeToString(&bytes)) return Status(SYNCD_ERR_INTERNAL, "cannot encode job " + std::to_string(job.job()));
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoError("open " + tmp);
  const bool written = write(fd, bytes.data(), bytes.size()) == ssize_t(bytes.size()) && fsync(fd) == 0;
  close(fd);
  if (!written || rename(tmp.c_str(), path.c_str()) != 0) {
    const Status st = ErrnoError("write " + path);
    unlink(tmp.c_str());
    return st;
  }
  return Status::Ok();
}

void JobStore::Forget(uint64_t job) const {
  if (!dir_.empty()) unlink(PathOf(job).c_str());
}

std::vector<control::RegisteredJob> JobStore::Load(std::vector<std::string>* unreadable) const {
  std::vector<control::RegisteredJob> jobs;
  if (dir_.empty()) return jobs;
  DIR* d = opendir(dir_.c_str());
  if (d == nullptr) return jobs;
  while (const dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    const std::string path = dir_ + "/" + name;
    std::ifstream in(path, std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    control::RegisteredJob job;
    char* end = nullptr;
    const uint64_t id = strtoull(name.c_str(), &end, 10);
    if (!in || *end != '\0' || !job.ParseFromString(bytes.str()) || job.job() != id) {
      unreadable->push_back(path);
      unlink(path.c_str());
      continue;
    }
    jobs.push_back(std::move(job));
  }
  closedir(d);
  std::sort(jobs.begin(), jobs.end(), [](const auto& a, const auto& b) { return a.job() < b.job(); });
  return jobs;
}

}  // namespace syncd
