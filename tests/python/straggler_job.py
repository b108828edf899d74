"""Live straggler attribution, run on every rank of a syncrun job:

    syncrun [-N NODES] -n RANKS -- python3 straggler_job.py [--rank R] [--sleep-ms MS] [--steps N]

Rank R sleeps MS before each of N allreduces (a slow input pipeline). After those N collectives,
`syncctl status --json` of R's daemon must name R first among the stragglers, last to submit in
at least 90 % of them, with a mean lateness within 20 % of MS, and `syncctl watch --json --count 2`
must give two refreshes. On many nodes, rank 0's daemon (another node's when R is not on node 0)
must show the same in its job-wide view within 5 s: R first among the job's ranks with that
lateness behind the job's first node, the others not late, and R's node first among the nodes, later than the first node by MS within 20 %.
Every rank exits with the verdict of the ranks that checked.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import torch

import syncd.torch as hvd


def check(rank, sleep_ms, steps):
    syncctl = os.path.join(os.environ["SYNCD_BIN_DIR"], "syncctl")
    out = subprocess.run([syncctl, "--run-dir", os.environ["SYNCD_RUN_DIR"], "status", "--json"], check=True,
                         capture_output=True, text=True).stdout
    status = json.loads(out)
    stragglers = status["stragglers"]
    print("stragglers:", json.dumps(stragglers), flush=True)
    assert stragglers, "status lists no stragglers"
    worst = stragglers[0]
    assert worst["rank"] == rank, "worst straggler is rank %d, expected %d" % (worst["rank"], rank)
    assert int(worst["collectives"]) == steps, worst
    assert int(worst["last"]) >= 0.9 * steps, worst
    assert abs(worst["mean_late_ms"] - sleep_ms) <= 0.2 * sleep_ms, "lateness %.1f ms for a sleep of %.1f ms" % (
        worst["mean_late_ms"], sleep_ms)
    assert worst["wait_share"] > 0.9, worst
    table = subprocess.run([syncctl, "--run-dir", os.environ["SYNCD_RUN_DIR"], "status"], check=True,
                           capture_output=True, text=True).stdout
    print(table, flush=True)
    assert "stragglers" in table
    watch = subprocess.run([syncctl, "--run-dir", os.environ["SYNCD_RUN_DIR"], "watch", "--json", "--count", "2",
                            "--interval", "0.2"], check=True, capture_output=True, text=True, timeout=30).stdout
    assert len([json.loads(l) for l in watch.splitlines()]) == 2, watch


def check_job_view(rank, sleep_ms, steps):
    syncctl = os.path.join(os.environ["SYNCD_BIN_DIR"], "syncctl")
    deadline = time.time() + 5
    while True:
        status = json.loads(subprocess.run([syncctl, "--run-dir", os.environ["SYNCD_RUN_DIR"], "status", "--json"],
                                           check=True, capture_output=True, text=True).stdout)
        nodes = status.get("job", [])
        home = [n for n in nodes if any(r["rank"] == rank for r in n.get("ranks", []))]
        if home and all(int(n.get("collectives", 0)) >= steps for n in nodes):
            ranks = [r for n in nodes for r in n.get("ranks", [])]
            mine = next(r for r in ranks if r["rank"] == rank)
            if int(mine.get("collectives", 0)) >= steps:
                break
        assert time.time() < deadline, "no report with %d collectives after 5 s: %s" % (steps, nodes)
        time.sleep(0.1)
    print("job view:", json.dumps(nodes), flush=True)
    worst = max(ranks, key=lambda r: r.get("job_late_ms", -1))
    assert worst["rank"] == rank, "the job view's latest rank is %d, expected %d" % (worst["rank"], rank)
    assert abs(worst["job_late_ms"] - sleep_ms) <= 0.2 * sleep_ms, worst
    for r in ranks:
        if r is not worst:
            assert r.get("job_late_ms", 0) < 0.2 * sleep_ms, r
    latest = max(nodes, key=lambda n: n.get("late_ms", -1))
    assert latest is home[0], "the latest node is %d, expected %d" % (latest.get("node", 0), home[0].get("node", 0))
    assert abs(latest["late_ms"] - sleep_ms) <= 0.2 * sleep_ms, "node lateness %.1f ms for a sleep of %.1f ms" % (
        latest["late_ms"], sleep_ms)
    for n in nodes:
        if n is not latest:
            assert n.get("late_ms", 0) < 0.2 * sleep_ms, n
    table = subprocess.run([syncctl, "--run-dir", os.environ["SYNCD_RUN_DIR"], "status"], check=True,
                           capture_output=True, text=True).stdout
    print(table[table.index("job "):], flush=True)


def start_dir():
    return os.path.join(tempfile.gettempdir(), "syncd-straggler-start-" + os.environ["SYNCD_JOB_ID"])


def start_together():
    """Every rank starts its steps within a millisecond or so: a barrier through files in the
    job's own directory, outside syncd (a collective would count in the straggler window). Without
    it the first step's lateness includes how much later one rank finished importing torch and
    attaching (178 ms once, under a loaded ctest: a 69 ms mean for a 50 ms sleep)."""
    here = start_dir()
    os.makedirs(here, exist_ok=True)
    open(os.path.join(here, str(hvd.rank())), "w").close()
    deadline = time.time() + 60
    while len(os.listdir(here)) < hvd.size():
        assert time.time() < deadline, "the other ranks never started"
        time.sleep(0.001)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", type=int, default=1)
    parser.add_argument("--sleep-ms", type=float, default=50.0)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    hvd.init()
    start_together()
    for step in range(args.steps):
        if hvd.rank() == args.rank:
            time.sleep(args.sleep_ms / 1000.0)
        hvd.allreduce(torch.ones(1000), name="straggler.grad")
    ok = 1
    # The straggler's node checks (its daemon sees its ranks), before any other collective.
    if hvd.rank() == args.rank:
        try:
            check(args.rank, args.sleep_ms, args.steps)
        except Exception as e:
            print("straggler check failed: %s" % e, file=sys.stderr, flush=True)
            ok = 0
    if hvd.rank() == 0 and hvd.size() > hvd.local_size():
        try:
            check_job_view(args.rank, args.sleep_ms, args.steps)
        except Exception as e:
            print("job view check failed: %s" % e, file=sys.stderr, flush=True)
            ok = 0
    ok = int(hvd.allreduce(torch.tensor([ok]), op=hvd.Min, name="straggler.verdict").item())
    if hvd.rank() == 0:  # every rank is past the start
        shutil.rmtree(start_dir(), ignore_errors=True)
    hvd.shutdown()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
