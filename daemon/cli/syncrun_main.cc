// syncrun: start a local syncd and K ranks of a command, e.g. `syncrun -n 4 -- python3 train.py`.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <climits>
#include <cstdlib>
#include <filesystem>

#include "daemon/base/version.h"
#include "daemon/launch/launcher.h"

namespace {

// --on-loss, --elastic and what goes with them (Horovod's elastic jobs).
void AddElasticOptions(CLI::App* app, syncd::LaunchOptions* opts, bool* elastic) {
  app->add_option("--on-loss", opts->on_loss,
                 "What the job does when a rank dies: fail (syncrun stops every rank, as mpirun does), continue "
                 "(the survivors train on without it) or restore (as continue, but the collective in flight fails "
                 "on every survivor, so hvd.elastic.run rolls back to the last commit); passed to every syncd")
      ->check(CLI::IsMember({"fail", "continue", "restore"}));
  app->add_flag("--elastic", *elastic,
               "An elastic job (Horovod's hvd.elastic): --on-loss restore unless told otherwise; the job stops only "
               "when fewer than --min-np ranks are left");
  app->add_option("--min-np", opts->min_np, "With --elastic: the fewest ranks the job may go on with (default 1)")
      ->check(CLI::Range(1, 1024));
  app->add_flag("--respawn", opts->respawn,
               "With --elastic: start a rank that dies again (up to 3 times, while its node's daemon lives); the "
               "replacement joins the others at their next state.commit() and gets the state from rank 0");
  app->add_option("--reset-limit", opts->reset_limit,
                 "With --elastic: how many times the job may change its ranks (each rank lost and each replacement "
                 "started counts one) before syncrun stops it, as horovodrun --reset-limit (default: no limit)")
      ->check(CLI::Range(0, 1000000));
  app->add_option("--max-np", opts->max_np,
                 "With --elastic: the most ranks the job may grow to (slots, spread evenly over the nodes: a "
                 "multiple of -N); -n of them start, the others wait for --host-discovery-script to offer them")
      ->check(CLI::Range(1, 1024));
  app->add_option("--host-discovery-script", opts->discovery_script,
                 "With --max-np: a command run every --discovery-interval seconds that prints the nodes with slots "
                 "for ranks now, one per line as NODE or NODE:SLOTS (node0, node1, ...); syncrun starts a rank in "
                 "each free slot it offers, which joins the others at their next state.commit() (horovodrun's "
                 "host discovery)");
  app->add_option("--discovery-interval", opts->discovery_interval_s,
                 "Seconds between runs of --host-discovery-script (default 1)")
      ->check(CLI::Range(0.05, 3600.0));
  app->add_flag("--restart-daemons", opts->restart_daemons,
               "With --elastic: start a node's syncd that dies again, with the same arguments (up to 3 times; not "
               "node 0's), as systemd's Restart= would; the node's ranks wait for it (SYNCD_REATTACH_S) and "
               "hvd.elastic.run attaches them again; the job takes the node back");
}

// One loss policy for syncrun and its daemons, in one option: syncrun's --on-loss (--elastic:
// restore unless told otherwise), else SYNCD_ON_LOSS as the daemons would read it; passed to
// every syncd. A policy in --syncd-arg would run the daemons under one policy while syncrun,
// its messages and its respawns followed another. False (after saying why) when refused.
bool ResolveLossPolicy(bool elastic, syncd::LaunchOptions* opts) {
  for (const std::string& a : opts->daemon_args)
    if (a == "--on-loss" || a.rfind("--on-loss=", 0) == 0) {
      fprintf(stderr, "syncrun: --syncd-arg=%s: the loss policy is syncrun's own option (it passes it to every syncd "
                      "and acts on it itself): use --on-loss %s\n",
              a.c_str(), a.size() > 10 ? a.substr(10).c_str() : "continue|restore|fail");
      return false;
    }
  if (const char* env = getenv("SYNCD_ON_LOSS"); opts->on_loss.empty() && env != nullptr && *env != '\0') {
    opts->on_loss = env;
    if (opts->on_loss != "fail" && opts->on_loss != "continue" && opts->on_loss != "restore") {
      fprintf(stderr, "syncrun: SYNCD_ON_LOSS=%s: not one of fail, continue, restore\n", env);
      return false;
    }
  }
  if (elastic && opts->on_loss.empty()) opts->on_loss = "restore";
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"syncrun: launch a local syncd and N ranks of a command"};
  syncd::LaunchOptions opts;
  std::string cores;
  bool no_bind = false;
  app.add_option("-N,--nodes", opts.nodes, "Daemons to start on this machine, each standing in for a node")
      ->check(CLI::Range(1, 64));
  app.add_option("-n,--ranks", opts.ranks, "Number of ranks, spread evenly over the nodes")->check(CLI::Range(1, 1024));
  app.add_option("--run-dir", opts.run_dir, "Run directory (default: a fresh one, removed at exit)");
  app.add_option("--cores", cores, "Daemon cores (passed to syncd --cores)");
  app.add_option("--syncd-arg", opts.daemon_args, "Extra flag for syncd (repeatable), e.g. --syncd-arg=--spin-us=50");
  bool elastic = false;
  AddElasticOptions(&app, &opts, &elastic);
  app.add_flag("--no-bind", no_bind, "Do not pin ranks to the cores the daemon leaves free");
  app.add_option("--ready-timeout", opts.ready_timeout_s, "Seconds to wait for the daemon");
  app.add_flag("--netns", opts.netns,
               "Each node in a network namespace of its own, joined to the others by a link through a bridge "
               "(UCX over TCP on it); needs root. Removed on exit, Ctrl-C or when syncrun is killed");
  app.add_option("--link-gbit", opts.link_gbit, "With --netns: each link's rate in Gbit/s, each way (tc tbf; 0: unlimited)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--network-only", opts.network_only,
               "With --netns: start no daemon and no rank; run COMMAND once while the network stands, with "
               "SYNCRUN_NETNS (the nodes' namespaces) and SYNCRUN_NODE_ADDRS set (for mpirun or gloo on the links)");
  app.footer("Usage: syncrun [OPTIONS] [--] COMMAND [ARGS...]");
  app.set_version_flag("--version", syncd::VersionLine("syncrun"), "Print the version and the protocols it speaks, and exit");
  // Everything from "--" (or from the first word that is not an option of syncrun) on is the
  // command, passed through untouched.
  int split = argc;
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--") {
      split = i;
      break;
    }
  if (split < argc) {
    opts.command.assign(argv + split + 1, argv + argc);
    app.allow_extras(false);
  } else {
    app.prefix_command(true);
  }
  try {
    app.parse(split, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (split == argc) opts.command = app.remaining();
  if (opts.command.empty()) {
    fprintf(stderr, "syncrun: no command given\n%s", app.help().c_str());
    return 2;
  }
  opts.bind_workers = !no_bind;
  if (!ResolveLossPolicy(elastic, &opts)) return 2;
  if ((opts.min_np > 1 || opts.respawn || opts.reset_limit >= 0 || opts.restart_daemons || opts.max_np > 0 ||
       !opts.discovery_script.empty()) &&
      (opts.on_loss.empty() || opts.on_loss == "fail")) {
    fprintf(stderr, "syncrun: --min-np, --max-np, --host-discovery-script, --respawn, --reset-limit and "
                    "--restart-daemons need --elastic (or --on-loss continue or restore)\n");
    return 2;
  }
  if (opts.max_np > opts.ranks && opts.discovery_script.empty()) {
    fprintf(stderr, "syncrun: --max-np %d above -n %d needs --host-discovery-script (it says when the other slots "
                    "may take ranks)\n", opts.max_np, opts.ranks);
    return 2;
  }
  if (!cores.empty()) opts.daemon_args.push_back("--cores=" + cores);
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return 1;
  self[n] = '\0';
  opts.syncd_path = (std::filesystem::path(self).parent_path() / "syncd").string();
  return syncd::RunJob(opts);
}
