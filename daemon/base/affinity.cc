#include "daemon/base/affinity.h"

#include <dirent.h>
#include <fcntl.h>
#include <hwloc.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>

namespace syncd {

StatusOr<std::vector<uint32_t>> ParseNumberList(const std::string& text, const std::string& what, uint64_t limit) {
  std::vector<uint32_t> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    const std::string token = text.substr(pos, comma - pos);
    const size_t dash = token.find('-');
    char* end = nullptr;
    const std::string lo_text = token.substr(0, dash);
    const std::string hi_text = dash == std::string::npos ? lo_text : token.substr(dash + 1);
    if (lo_text.empty() || hi_text.empty())
      return InvalidArgument(what + " '" + text + "': empty entry");
    unsigned long lo = strtoul(lo_text.c_str(), &end, 10);
    if (*end != '\0') return InvalidArgument(what + " '" + text + "': bad entry '" + token + "'");
    unsigned long hi = strtoul(hi_text.c_str(), &end, 10);
    if (*end != '\0' || hi < lo || hi >= limit)
      return InvalidArgument(what + " '" + text + "': bad entry '" + token + "'");
    for (unsigned long c = lo; c <= hi; ++c) out.push_back(uint32_t(c));
    pos = comma + 1;
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

StatusOr<CoreSet> ParseCoreList(const std::string& text) { return ParseNumberList(text, "core list", CPU_SETSIZE); }

std::string FormatNumberList(const std::vector<uint32_t>& numbers) {
  std::string out;
  for (size_t i = 0; i < numbers.size();) {
    size_t j = i;
    while (j + 1 < numbers.size() && numbers[j + 1] == numbers[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(numbers[i]);
    if (j > i) out += "-" + std::to_string(numbers[j]);
    i = j + 1;
  }
  return out;
}

CoreSet AllowedCores(int pid) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CoreSet cores;
  if (sched_getaffinity(pid, sizeof(set), &set) != 0) return cores;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cores.push_back(uint32_t(c));
  return cores;
}

uint32_t ProcessesSharingCores(const char* comm, const CoreSet& cores) {
  const std::string want = std::string(comm) + "\n";
  const int self = getpid();
  uint32_t n = 0;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return 0;
  while (dirent* e = readdir(proc)) {
    char* end = nullptr;
    const long pid = strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0' || pid == self) continue;
    char path[64], name[32] = {};
    snprintf(path, sizeof(path), "/proc/%ld/comm", pid);
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    const ssize_t len = read(fd, name, sizeof(name) - 1);
    close(fd);
    if (len <= 0 || want != std::string(name, size_t(len))) continue;
    const CoreSet theirs = AllowedCores(int(pid));
    std::vector<uint32_t> both;
    std::set_intersection(cores.begin(), cores.end(), theirs.begin(), theirs.end(), std::back_inserter(both));
    n += both.empty() ? 0 : 1;
  }
  closedir(proc);
  return n;
}

namespace {

// The hardware threads of the last core (by hwloc's logical order) that has an allowed PU.
CoreSet LastCore(const CoreSet& allowed) {
  CoreSet result;
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) return result;
  if (hwloc_topology_load(topo) == 0) {
    const int ncores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
    for (int i = ncores - 1; i >= 0 && result.empty(); --i) {
      hwloc_obj_t core = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, unsigned(i));
      int pu = -1;
      while ((pu = hwloc_bitmap_next(core->cpuset, pu)) != -1)
        if (std::binary_search(allowed.begin(), allowed.end(), uint32_t(pu))) result.push_back(uint32_t(pu));
    }
  }
  hwloc_topology_destroy(topo);
  if (result.empty() && !allowed.empty()) result.push_back(allowed.back());
  return result;
}

}  // namespace

StatusOr<CorePartition> ResolveCores(const std::string& setting) {
  const CoreSet allowed = AllowedCores();
  CorePartition p;
  if (setting == "none") {
    p.workers = allowed;
    return p;
  }
  if (setting == "auto") {
    p.daemon = LastCore(allowed);
  } else {
    SYNCD_ASSIGN_OR_RETURN(p.daemon, ParseCoreList(setting));
    for (uint32_t c : p.daemon)
      if (!std::binary_search(allowed.begin(), allowed.end(), c))
        return InvalidArgument("cores: CPU " + std::to_string(c) + " is not available to this process (allowed: " +
                               FormatCoreList(allowed) + ")");
  }
  std::set_difference(allowed.begin(), allowed.end(), p.daemon.begin(), p.daemon.end(),
                      std::back_inserter(p.workers));
  // A service manager that confined the daemon to exactly its cores (systemd's CPUAffinity=)
  // leaves the rest of the machine to the workers.
  if (p.workers.empty()) {
    std::ifstream online("/sys/devices/system/cpu/online");
    std::string list;
    if (std::getline(online, list))
      if (auto cores = ParseCoreList(list); cores.ok())
        std::set_difference(cores->begin(), cores->end(), p.daemon.begin(), p.daemon.end(),
                            std::back_inserter(p.workers));
  }
  // On a one-core machine there is nothing left; workers share the daemon's core.
  if (p.workers.empty()) p.workers = allowed;
  return p;
}

Status PinCurrentThread(const CoreSet& cores) {
  if (cores.empty()) return Status::Ok();
  cpu_set_t set;
  CPU_ZERO(&set);
  for (uint32_t c : cores) CPU_SET(c, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) return ErrnoError("sched_setaffinity(" + FormatCoreList(cores) + ")");
  return Status::Ok();
}

}  // namespace syncd
