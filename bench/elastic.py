"""bench/elastic.sh's driver: the time from a rank's death to the job's next completed step.

For each shape (2 x 2 and 4 x 1 by default) and each trial, a Horovod training job
(bench/elastic_job.py, Horovod's API on syncd.torch) runs under syncrun with four ranks; rank 1
SIGKILLs itself in the middle of its backward pass at step --kill-step:
  continue  syncrun --on-loss continue: the survivors train on. The figure is the time from the
            kill to the moment every survivor has completed a step after it.
  restore   syncrun --elastic (--on-loss restore), the job in Horovod's elastic form (hvd.elastic.run,
            a TorchState committed after every step): the step in flight raises
            HorovodInternalError on every survivor, which roll back to the last commit, renumber and
            sync from the new rank 0; the figure is the time from the kill to the moment every
            survivor has completed a step after it.
  respawn   syncrun --elastic --respawn, the same elastic job: a replacement of the killed rank
            starts (a new Python process), joins the others at their next commit and gets the
            state from rank 0; the figure is the time from the kill to the end of the
            replacement's first step, and its parameters must equal the others' at the end.
  daemon    syncrun --elastic --restart-daemons, the same elastic job: rank 3 SIGKILLs its node's
            syncd instead (node 1 of 2 x 2, node 3 of 4 x 1); syncrun starts it again, the node's
            ranks (the same processes) hand their segments to it and rejoin; the figure is the time
            from the kill to the moment every rank, the node's included, has completed a step after
            it. Not in the default --policies.
  restart   the usual recovery, measured in the same run: syncrun (--on-loss fail) stops every
            rank, and the job is launched again at once (new daemons, new Python processes) from
            the checkpoint rank 0 wrote after every step; the figure is the time from the kill to
            the end of the restarted job's first step (rank 0), and the steps it had to redo.
Prints a table and, last, one JSON line. Every rank and daemon shares this machine's cores.

    bench/elastic.sh [--shapes 2x2,4x1] [--trials 3] [--steps 25] [--kill-step 10] [--model cnn|resnet18]
                     [--policies continue,restore,respawn,daemon,restart] [--respawn-steps N] [--build build]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))
p = argparse.ArgumentParser()
p.add_argument("--shapes", default="2x2,4x1")
p.add_argument("--trials", type=int, default=3)
p.add_argument("--steps", type=int, default=25)
p.add_argument("--kill-step", type=int, default=10)
p.add_argument("--model", default="cnn")
p.add_argument("--policies", default="continue,restore,respawn,restart")
p.add_argument("--respawn-steps", type=int, default=0,
               help="steps after the kill in the respawn trial (room for the replacement to start; "
                    "default: 150 for cnn, 30 for resnet18)")
p.add_argument("--build", default=os.path.join(here, "..", "build"))
a = p.parse_args()
build = os.path.abspath(a.build)
env = dict(os.environ, PYTHONPATH=os.path.join(build, "python"))
VICTIM = 1


def syncrun(nodes, out, *job_args, launcher=()):
    cmd = [os.path.join(build, "bin", "syncrun"), "-N", str(nodes), "-n", "4", "--syncd-arg=--log-level=error"]
    cmd += list(launcher)
    cmd += ["--", "/usr/bin/python3", os.path.join(here, "elastic_job.py"), out, "--model", a.model] + list(job_args)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)


def ranks_of(out):
    return [json.load(open(os.path.join(out, f))) for f in sorted(os.listdir(out)) if f.startswith("rank")]


def killed_at(out, p):
    path = os.path.join(out, "killed")
    if not os.path.exists(path):
        sys.exit("elastic.sh: the victim did not die as planned:\n" + p.stdout + p.stderr)
    return float(open(path).read())


def step_ms(ranks, before):
    ends = sorted(t for r in ranks for t in r["ends"] if t < before)
    per_rank = [r["ends"] for r in ranks]
    gaps = [b - a for ends in per_rank for a, b in zip(ends, ends[1:]) if b < before]
    return 1e3 * statistics.median(gaps) if gaps else float("nan")


def trial_survived(nodes, launcher, *job_args):
    with tempfile.TemporaryDirectory() as out:
        p = syncrun(nodes, out, "--steps", str(a.steps), "--victim", str(VICTIM), "--kill-step", str(a.kill_step),
                    *job_args, launcher=launcher)
        if p.returncode != 0:
            sys.exit("elastic.sh: the job %s failed (exit %d):\n%s%s" % (launcher, p.returncode, p.stdout, p.stderr))
        t_kill = killed_at(out, p)
        ranks = ranks_of(out)
        assert sorted(r["rank"] for r in ranks) == [r for r in range(4) if r != VICTIM], ranks
        assert all(sorted(set(r["steps"])) == list(range(a.steps)) for r in ranks), ranks
        after = [min(t for t in r["ends"] if t > t_kill) for r in ranks]
        return max(after) - t_kill, step_ms(ranks, t_kill), max(len(r["steps"]) - len(set(r["steps"])) for r in ranks)


def trial_continue(nodes):
    return trial_survived(nodes, ["--on-loss", "continue"])


def trial_restore(nodes):
    return trial_survived(nodes, ["--elastic"], "--elastic")


def trial_respawn(nodes):
    after = a.respawn_steps or (30 if a.model == "resnet18" else 150)
    with tempfile.TemporaryDirectory() as out:
        p = syncrun(nodes, out, "--steps", str(a.kill_step + after), "--victim", str(VICTIM), "--kill-step",
                    str(a.kill_step), "--elastic", launcher=["--elastic", "--respawn"])
        if p.returncode != 0:
            sys.exit("elastic.sh: the job under --respawn failed (exit %d):\n%s%s" % (p.returncode, p.stdout, p.stderr))
        t_kill = killed_at(out, p)
        ranks = ranks_of(out)
        new = next((r for r in ranks if r["rank"] == VICTIM), None)
        if new is None or not new["replacement"] or not new["ends"]:
            sys.exit("elastic.sh: the replacement did not join:\n" + p.stdout + p.stderr)
        if len({r["digest"] for r in ranks}) != 1:
            sys.exit("elastic.sh: the replacement's parameters differ from the others'")
        survivors = [r for r in ranks if r["rank"] != VICTIM]
        return new["ends"][0] - t_kill, step_ms(survivors, t_kill), 0


def trial_daemon(nodes):
    victim = 3  # on a node other than node 0, whose daemon serves the rendezvous
    with tempfile.TemporaryDirectory() as out:
        p = syncrun(nodes, out, "--steps", str(a.steps), "--victim", str(victim), "--kill-step", str(a.kill_step),
                    "--elastic", "--kill-daemon", launcher=["--elastic", "--restart-daemons"])
        if p.returncode != 0:
            sys.exit("elastic.sh: the job under --restart-daemons failed (exit %d):\n%s%s" %
                     (p.returncode, p.stdout, p.stderr))
        t_kill = killed_at(out, p)
        ranks = ranks_of(out)
        if sorted(r["rank"] for r in ranks) != [0, 1, 2, 3] or len({r["digest"] for r in ranks}) != 1:
            sys.exit("elastic.sh: after the daemon's restart the ranks differ:\n" + p.stdout + p.stderr)
        after = [min(t for t in r["ends"] if t > t_kill) for r in ranks]
        return max(after) - t_kill, step_ms(ranks, t_kill), max(len(r["steps"]) - len(set(r["steps"])) for r in ranks)


def trial_restart(nodes):
    with tempfile.TemporaryDirectory() as out, tempfile.TemporaryDirectory() as out2:
        ck = os.path.join(out, "checkpoint.pt")
        p = syncrun(nodes, out, "--steps", str(a.steps), "--victim", str(VICTIM), "--kill-step", str(a.kill_step),
                    "--checkpoint", ck)
        if p.returncode == 0:
            sys.exit("elastic.sh: the job under --on-loss fail finished despite the kill")
        t_kill = killed_at(out, p)
        p2 = syncrun(nodes, out2, "--steps", "2", "--checkpoint", ck, "--resume")
        if p2.returncode != 0:
            sys.exit("elastic.sh: the restarted job failed (exit %d):\n%s%s" % (p2.returncode, p2.stdout, p2.stderr))
        ranks = ranks_of(out2)
        r0 = next(r for r in ranks if r["rank"] == 0)
        redo = a.kill_step - r0["steps"][0]  # steps done before the kill that the restart runs again
        return r0["ends"][0] - t_kill, float("nan"), redo


rows = []
for shape in a.shapes.split(","):
    nodes, local = (int(x) for x in shape.split("x"))
    assert nodes * local == 4, "four ranks: 2x2 or 4x1"
    for policy, fn in (("continue", trial_continue), ("restore", trial_restore), ("respawn", trial_respawn),
                       ("daemon", trial_daemon), ("restart", trial_restart)):
        if policy not in a.policies.split(","):
            continue
        results = [fn(nodes) for _ in range(a.trials)]
        times = [r[0] for r in results]
        steps = [r[1] for r in results if r[1] == r[1]]
        rows.append({"shape": shape, "policy": policy, "kill_to_next_step_s": statistics.median(times),
                     "min_s": min(times), "max_s": max(times), "trials": a.trials,
                     "step_ms": statistics.median(steps) if steps else None,
                     "steps_redone": max(r[2] for r in results)})
print("time from a rank's SIGKILL (mid-backward, step %d) to the job's next completed step; model %s, 4 ranks, "
      "median of %d" % (a.kill_step, a.model, a.trials))
print("%-6s %-9s %12s %18s %10s %12s" % ("shape", "policy", "median s", "range s", "step ms", "steps redone"))
for r in rows:
    print("%-6s %-9s %12.3f %18s %10s %12d" % (r["shape"], r["policy"], r["kill_to_next_step_s"],
                                              "%.3f-%.3f" % (r["min_s"], r["max_s"]),
                                              "%.1f" % r["step_ms"] if r["step_ms"] else "-", r["steps_redone"]))
for shape in a.shapes.split(","):
    s = next((r for r in rows if r["shape"] == shape and r["policy"] == "restart"), None)
    for policy in ("continue", "restore", "respawn", "daemon"):
        c = next((r for r in rows if r["shape"] == shape and r["policy"] == policy), None)
        if s is None or c is None:
            continue
        print("%s: %s recovers %.0fx sooner than a restart from the checkpoint" %
              (shape, policy, s["kill_to_next_step_s"] / c["kill_to_next_step_s"]))
print(json.dumps({"bench": "elastic", "model": a.model, "kill_step": a.kill_step, "unix_time": int(time.time()),
                  "rows": rows}))
