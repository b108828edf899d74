#include "bench/daemon_status.h"

#include <cstdio>
#include <cstdlib>

#include "bench/bench_util.h"

namespace syncd::bench {

std::string ReadDaemonStatus(const std::string& syncctl) {
  const char* dir = getenv("SYNCD_RUN_DIR");
  const std::string cmd = syncctl + " --run-dir '" + (dir ? dir : "") + "' status --json";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) Die("running " + cmd);
  std::string json;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), p)) > 0;) json.append(buf, n);
  if (pclose(p) != 0 || json.empty()) Die("no status from " + cmd);
  return json;
}

double SumField(const std::string& json, const std::string& key, size_t from) {
  double sum = 0;
  const std::string needle = "\"" + key + "\":";
  for (size_t at = json.find(needle, from); at != std::string::npos; at = json.find(needle, at + 1)) {
    size_t v = at + needle.size();
    while (v < json.size() && (json[v] == ' ' || json[v] == '"')) ++v;
    sum += strtod(json.c_str() + v, nullptr);
  }
  return sum;
}

std::string SyncctlBeside(const std::string& argv0) {
  return (argv0.find('/') == std::string::npos ? std::string() : argv0.substr(0, argv0.rfind('/') + 1)) + "syncctl";
}

}  // namespace syncd::bench
