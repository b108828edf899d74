// The last step of a launcher's child: exec a command line, or say why not and exit 127 (as a
// shell does for a command it cannot run).
#ifndef SYNCD_DAEMON_LAUNCH_EXEC_H_
#define SYNCD_DAEMON_LAUNCH_EXEC_H_

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace syncd {

// execvp(argv); on failure writes "<who>cannot run <argv[0]>: <why>" to stderr and _exits 127.
[[noreturn]] inline void ExecOrExit(const std::vector<std::string>& argv, const char* who) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execvp(args[0], args.data());
  dprintf(STDERR_FILENO, "%scannot run %s: %s\n", who, args[0], strerror(errno));
  _exit(127);
}

}  // namespace syncd

#endif  // SYNCD_DAEMON_LAUNCH_EXEC_H_
