// syncctl's parts shared by its files: the control stub, how it prints, and the job subcommands
// (syncctl_jobs.cc) that main dispatches to.
#ifndef SYNCD_DAEMON_CLI_SYNCCTL_H_
#define SYNCD_DAEMON_CLI_SYNCCTL_H_

#include <cstdint>
#include <map>
#include <string>

#include <CLI/CLI.hpp>

#include "syncd.grpc.pb.h"

namespace syncctl {

using ControlStub = syncd::control::Control::Stub;

// "1.5 MiB".
std::string Bytes(uint64_t b);
// One JSON object on a line, every field shown, by its proto name.
void PrintJson(const google::protobuf::Message& m);
// Says no daemon answers at `run_dir` and why; returns syncctl's exit status for it.
int NoDaemon(const std::string& run_dir, const grpc::Status& st);

// A node service's registered jobs, as a table (syncctl status, syncctl job list).
void PrintJobs(const syncd::control::StatusReply& s);

// syncctl job add|remove|drain|list: the subcommands and what they were given.
struct JobCommands {
  CLI::App *add = nullptr, *remove = nullptr, *drain = nullptr, *list = nullptr;
  uint64_t id = 0;
  std::string user, group;
  uint32_t weight = 1;
  double drain_timeout = -1;
  // A job of several nodes: this node's place among them, the rendezvous and the token.
  uint32_t nodes = 1, node_rank = 0, local_size = 0;
  std::string rendezvous, token_file;
  // Its own settings over the daemon's (--on-loss, --coord, ...): name -> value ("": not given).
  std::map<std::string, std::string> settings;
};
void AddJobCommands(CLI::App& app, bool* json, JobCommands* j);
// The job subcommand given, carried out: its exit status, or -1 when none was given.
int RunJobCommand(ControlStub& stub, const std::string& run_dir, const JobCommands& j, bool json);

}  // namespace syncctl

#endif  // SYNCD_DAEMON_CLI_SYNCCTL_H_
