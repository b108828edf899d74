// syncctl job add|remove|drain|list: a node service's registered jobs (control.sock is its
// administrators'), and their table in syncctl status.
#include <google/protobuf/util/json_util.h>
#include <grp.h>
#include <pwd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

#include "daemon/cli/syncctl.h"

namespace syncctl {
namespace {

// A user or group given by name or number (syncctl job add --uid/--gid).
bool ParseId(const std::string& text, bool is_group, int64_t* id) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = strtoull(text.c_str(), &end, 10);
  if (!text.empty() && text[0] != '-' && errno == 0 && *end == '\0' && n <= UINT32_MAX) {
    *id = int64_t(n);
    return true;
  }
  if (is_group) {
    const struct group* g = getgrnam(text.c_str());
    if (g != nullptr) *id = g->gr_gid;
    return g != nullptr;
  }
  const passwd* pw = getpwnam(text.c_str());
  if (pw != nullptr) *id = pw->pw_uid;
  return pw != nullptr;
}

// syncctl job drain: no new rank of the job; removed once nothing of it is in flight, or at the timeout.
int DrainJob(ControlStub& stub, const std::string& run_dir, uint64_t job, double timeout_s) {
  grpc::ClientContext ctx;
  syncd::control::DrainJobRequest req;
  req.set_job(job);
  req.set_timeout_s(timeout_s);
  syncd::control::DrainJobReply reply;
  const grpc::Status st = stub.DrainJob(&ctx, req, &reply);
  if (st.error_code() == grpc::StatusCode::UNAVAILABLE) return NoDaemon(run_dir, st);
  if (!st.ok()) {
    fprintf(stderr, "syncctl job drain: %s\n", st.error_message().c_str());
    return 1;
  }
  printf("job %lu drained in %.2f s%s (%u of its ranks were attached and are disconnected)\n", (unsigned long)job,
         reply.seconds(), reply.deadline_passed() ? ": the timeout passed, what it had in flight failed" : "",
         reply.ranks_disconnected());
  return 0;
}

// syncctl job add|remove: a node service's registered jobs (control.sock is its administrators').
// A job's token: the file's first line, else $SYNCD_JOB_TOKEN (as the Slurm prolog passes it to a
// daemon); empty when neither gives one.
bool ReadToken(const std::string& file, std::string* token) {
  if (file.empty()) {
    const char* env = getenv("SYNCD_JOB_TOKEN");
    *token = env != nullptr ? env : "";
    return true;
  }
  FILE* f = fopen(file.c_str(), "r");
  if (f == nullptr) return false;
  char line[512] = {};
  const bool read = fgets(line, sizeof(line), f) != nullptr;
  fclose(f);
  *token = read ? line : "";
  while (!token->empty() && (token->back() == '\n' || token->back() == '\r')) token->pop_back();
  return true;
}

int ChangeJobs(ControlStub& stub, const std::string& run_dir, bool add, const JobCommands& j) {
  const uint64_t job = j.id;
  const std::string &user = j.user, &group = j.group;
  const uint32_t weight = j.weight;
  grpc::ClientContext ctx;
  // A job of several nodes is linked to the others before the reply: as long as the rendezvous waits.
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(add && j.nodes > 1 ? 600 : 10));
  grpc::Status st;
  if (add) {
    int64_t uid = 0, gid = -1;
    if (!ParseId(user, false, &uid)) {
      fprintf(stderr, "syncctl job add: --uid %s: no such user\n", user.c_str());
      return 2;
    }
    if (!group.empty() && !ParseId(group, true, &gid)) {
      fprintf(stderr, "syncctl job add: --gid %s: no such group\n", group.c_str());
      return 2;
    }
    syncd::control::AddJobRequest req;
    req.mutable_job()->set_job(job);
    req.mutable_job()->set_uid(uint32_t(uid));
    req.mutable_job()->set_gid(gid);
    req.mutable_job()->set_weight(weight);
    std::string token;
    if (!ReadToken(j.token_file, &token)) {
      fprintf(stderr, "syncctl job add: --token-file %s: %s\n", j.token_file.c_str(), strerror(errno));
      return 2;
    }
    req.mutable_job()->set_nodes(j.nodes);
    req.mutable_job()->set_node_rank(j.node_rank);
    req.mutable_job()->set_local_size(j.local_size);
    req.mutable_job()->set_rendezvous(j.rendezvous);
    req.mutable_job()->set_token(token);
    std::string settings;
    for (const auto& [name, value] : j.settings)
      if (!value.empty()) {
        (*req.mutable_job()->mutable_settings())[name] = value;
        settings += ", --" + name + " " + value;
      }
    syncd::control::AddJobReply reply;
    st = stub.AddJob(&ctx, req, &reply);
    if (st.ok()) printf("job %lu registered for uid %ld%s, weight %u%s%s\n", (unsigned long)job, (long)uid,
                        gid >= 0 ? (" gid " + std::to_string(gid)).c_str() : "", weight, settings.c_str(),
                        j.nodes > 1 ? (", node " + std::to_string(j.node_rank) + " of " + std::to_string(j.nodes) +
                                       ": linked to the others")
                                          .c_str()
                                    : "");
  } else {
    syncd::control::RemoveJobRequest req;
    req.set_job(job);
    syncd::control::RemoveJobReply reply;
    st = stub.RemoveJob(&ctx, req, &reply);
    if (st.ok()) printf("job %lu removed (%u of its ranks were attached and are disconnected)\n", (unsigned long)job,
                        reply.ranks_disconnected());
  }
  if (st.error_code() == grpc::StatusCode::UNAVAILABLE) return NoDaemon(run_dir, st);
  if (!st.ok()) {
    fprintf(stderr, "syncctl job %s: %s\n", add ? "add" : "remove", st.error_message().c_str());
    return 1;
  }
  return 0;
}

// syncctl job list.
int ListJobs(ControlStub& stub, const std::string& run_dir, bool json) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  syncd::control::StatusReply reply;
  grpc::Status st = stub.Status(&ctx, syncd::control::StatusRequest(), &reply);
  if (!st.ok()) return NoDaemon(run_dir, st);
  if (!reply.node_service()) {
    fprintf(stderr, "syncctl job list: the daemon at %s serves its own user's job (--node-service off)\n", run_dir.c_str());
    return 1;
  }
  if (!json) {
    PrintJobs(reply);
    return 0;
  }
  syncd::control::StatusReply jobs;
  *jobs.mutable_jobs() = reply.jobs();
  PrintJson(jobs);
  return 0;
}


}  // namespace

// A node service's registered jobs.
void PrintJobs(const syncd::control::StatusReply& s) {
  printf("jobs       %d registered (node service)\n", s.jobs_size());
  if (s.jobs_size() == 0) return;
  printf("  %-12s %-12s %7s %6s %-8s %6s %7s %-19s %9s %10s %10s %10s %6s %9s %9s\n", "JOB", "USER", "GID", "WEIGHT",
         "STATE", "RANKS", "NODE", "REGISTERED", "REQUESTS", "BYTES", "LINK_BYTES", "LINK_WAITS", "ERRORS", "ENGINE_S",
         "WAITED_S");
  for (const auto& j : s.jobs()) {
    const std::string user = j.user().empty() ? "uid " + std::to_string(j.uid()) : j.user() + " (" + std::to_string(j.uid()) + ")";
    char when[32] = "-";
    const time_t t = time_t(j.added_unix_s());
    tm local{};
    if (t > 0 && localtime_r(&t, &local) != nullptr) strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &local);
    // This node's place among the job's nodes ("0/2"), "-" for a job of this node alone.
    const std::string node = j.nodes() > 1 ? std::to_string(j.node_rank()) + "/" + std::to_string(j.nodes()) : "-";
    printf("  %-12lu %-12s %7s %6u %-8s %6u %7s %-19s %9lu %10s %10s %10s %6lu %9.3f %9.3f\n", (unsigned long)j.job(),
           user.c_str(), j.gid() < 0 ? "any" : std::to_string(j.gid()).c_str(), j.weight(),
           j.running() ? "running" : "idle", j.ranks_attached(), node.c_str(), when, (unsigned long)j.requests(),
           Bytes(j.bytes()).c_str(), j.nodes() > 1 ? Bytes(j.link_bytes()).c_str() : "-",
           j.nodes() > 1 ? std::to_string(j.link_turns_waited()).c_str() : "-", (unsigned long)j.errors(), j.engine_s(),
           j.waited_s());
  }
}

void AddJobCommands(CLI::App& app, bool* json, JobCommands* j) {
  CLI::App* job = app.add_subcommand("job", "A node service's jobs (syncd --node-service on): who may attach to which");
  j->add = job->add_subcommand("add", "Register a job: its ranks, running as --uid, may attach from now on");
  j->add->add_option("--job", j->id, "The id its ranks carry (SYNCD_JOB_ID, or Slurm's job id)")->required();
  j->add->add_option("--uid", j->user, "The user its ranks run as (a name or a number)")->required();
  j->add->add_option("--gid", j->group, "Their group as well (a name or a number; default: any group of the user)");
  j->add->add_option("--weight", j->weight, "Its share of the daemon's cores and links against other jobs")
      ->check(CLI::Range(1u, 1000u));
  j->add->add_option("--nodes", j->nodes, "The nodes it runs on (several: it is linked to the others' daemons now)")
      ->check(CLI::Range(1u, 4096u));
  j->add->add_option("--node-rank", j->node_rank, "This node's place among them (0: the first, serving the rendezvous)");
  j->add->add_option("--local-size", j->local_size, "Its ranks on this node (default: as its first rank says)");
  j->add->add_option("--rendezvous", j->rendezvous, "host:port its first node serves the rendezvous at (several nodes)");
  j->add->add_option("--token-file", j->token_file,
                     "A file whose first line is its token, the same on every node [default: env SYNCD_JOB_TOKEN]");
  // Its own settings over the daemon's (the daemon's flags of the same names; base/config.h's kJobSettings).
  const std::pair<const char*, const char*> settings[] = {
      {"on-loss", "What a lost rank or node does to it: fail, continue, restore [default: the daemon's]"},
      {"coord", "How its daemons agree: negotiate, gs, nbcs, topo [default: the daemon's]"},
      {"stall-warning-s", "Warn of its stalls after this many seconds [default: the daemon's]"},
      {"stall-shutdown-s", "End it after a stall of this many seconds, 0 never [default: the daemon's]"}};
  for (const auto& [name, help] : settings) j->add->add_option(std::string("--") + name, j->settings[name], help);
  j->remove = job->add_subcommand("remove", "Remove a job: no rank of it attaches again; attached ones are disconnected");
  j->remove->add_option("JOB", j->id, "The job's id")->required();
  j->drain = job->add_subcommand(
      "drain", "Drain a job: no new rank of it attaches; it is removed once nothing of it is in flight, or at the timeout");
  j->drain->add_option("JOB", j->id, "The job's id")->required();
  j->drain->add_option("--timeout", j->drain_timeout, "Seconds before what it has in flight fails (default: --drain-timeout)");
  j->list = job->add_subcommand("list", "The registered jobs");
  j->list->add_flag("--json", *json, "Print the status as one JSON object");
  job->require_subcommand(1);
}

int RunJobCommand(ControlStub& stub, const std::string& run_dir, const JobCommands& j, bool json) {
  if (j.add->parsed() || j.remove->parsed()) return ChangeJobs(stub, run_dir, j.add->parsed(), j);
  if (j.list->parsed()) return ListJobs(stub, run_dir, json);
  if (j.drain->parsed()) return DrainJob(stub, run_dir, j.id, j.drain_timeout);
  return -1;
}

}  // namespace syncctl
