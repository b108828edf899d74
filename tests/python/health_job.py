"""Naming an unresponsive rank or daemon within 5 s, run on every rank of a syncrun job:

    syncrun [-N NODES] -n RANKS -- python3 health_job.py --rank R --checker C [--daemon-node N]

C asks its own daemon: when R is on another node, the job-wide view (each daemon's health reports)
must name it.

Phase 1: rank R stops itself (SIGSTOP) before an allreduce the others have submitted; rank C's
`syncctl status --json` must call R unresponsive ("stopped") within 5 s, then C sends SIGCONT.
Phase 2: rank R spins outside syncd (a busy loop, as a hung data loader or a long Python step
would) while the others wait in an allreduce; status must say R has not called syncd while a
tensor waits for it, its process running, within 5 s; C then lets R go on. Both allreduces must
then complete with every rank's data.
Phase 3 (--daemon-node N, on another node than C's): C stops N's daemon (SIGSTOP) while every rank
submits an allreduce; C's status must call that daemon unresponsive within 5 s, then C sends
SIGCONT and the allreduce completes with every rank's data. Meanwhile every other daemon must
stay "ok" in C's view: with many nodes the reports travel through a tree, and the nodes below the
stopped one must go round it without being called unresponsive themselves.
Every rank exits with C's verdict.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time

import torch

import syncd.torch as hvd


def status():
    syncctl = os.path.join(os.environ["SYNCD_BIN_DIR"], "syncctl")
    out = subprocess.run([syncctl, "--run-dir", os.environ["SYNCD_RUN_DIR"], "status", "--json"], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def client_status(rank):
    """The rank as the checker's daemon sees it: its own client, or a row of the job-wide view."""
    s = status()
    for c in s.get("clients", []):
        if c["rank"] == rank:
            return c
    for node in s.get("job", []):
        for c in node.get("ranks", []):
            if c["rank"] == rank:
                return dict(c, node=node.get("node", 0))
    return None  # not reported yet


def wait_for_job_view(size, nodes):
    """Every rank and daemon of the job in this daemon's status (many nodes: once their reports came)."""
    deadline = time.time() + 5
    while True:
        s = status()
        ranks = sorted(r["rank"] for n in s.get("job", []) for r in n.get("ranks", []))
        if nodes == 1 or (ranks == list(range(size)) and all(n.get("state") == "ok" for n in s["job"])):
            return
        assert time.time() < deadline, "the job view lacks ranks or daemons after 5 s: %s" % s.get("job")
        time.sleep(0.05)


def node_status(node):
    return next(n for n in status().get("job", []) if n.get("node", 0) == node)


def wait_unresponsive(rank, words, started):
    """Seconds from `started` until status names `rank` unresponsive with `words` in the reason."""
    c = None
    while time.time() - started < 30:
        c = client_status(rank)
        if c is not None and words in c.get("unresponsive", ""):
            print("rank %d after %.1f s: %s (last seen %.1f s ago, process %s)" % (
                rank, time.time() - started, c["unresponsive"], c["last_seen_s"], c["process"]), flush=True)
            return time.time() - started, c
        time.sleep(0.1)
    raise AssertionError("status never called rank %d unresponsive (%r); last: %s" % (rank, words, c))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--checker", type=int, required=True)
    parser.add_argument("--daemon-node", type=int, default=-1)
    # Phase 2 needs a rank on R's node that submitted the tensor R holds up: a node with one rank
    # cannot know a tensor waits for it (the other nodes' names reach it only once R submits).
    parser.add_argument("--no-spin", action="store_true")
    args = parser.parse_args()
    hvd.init()
    go = os.path.join(os.path.dirname(os.environ["SYNCD_RUN_DIR"]), "health.go")  # syncrun: the job's directory
    for i in range(3):
        hvd.allreduce(torch.ones(10), name="health.warmup")
    hvd.barrier()
    ok, error = 1, ""
    if hvd.rank() == args.checker:
        try:
            wait_for_job_view(hvd.size(), status()["node_count"])
        except AssertionError as e:
            ok, error = 0, str(e)
    hvd.barrier()
    phases = (("stop", "stopped"),) if args.no_spin else (("stop", "stopped"), ("spin", "not calling syncd"))
    for phase, words in phases:
        name = "health." + phase
        if hvd.rank() == args.rank:
            if phase == "stop":
                os.kill(os.getpid(), signal.SIGSTOP)  # the checker sends SIGCONT
            else:
                deadline = time.time() + 30
                while not os.path.exists(go) and time.time() < deadline:
                    pass  # busy outside syncd
                os.unlink(go)
            out = hvd.allreduce(torch.full((10,), float(hvd.rank())), op=hvd.Sum, name=name)
        else:
            started = time.time()
            h = hvd.allreduce_async(torch.full((10,), float(hvd.rank())), op=hvd.Sum, name=name)
            if hvd.rank() == args.checker:
                try:
                    took, c = wait_unresponsive(args.rank, words, started)
                    assert took <= 5.0, "named after %.1f s (goal: 5 s)" % took
                    if phase == "spin":
                        assert c["process"] == "running", c
                except AssertionError as e:
                    ok, error = 0, str(e)
                if phase == "stop":
                    os.kill(client_status(args.rank)["pid"], signal.SIGCONT)
                else:
                    open(go, "w").close()
            out = hvd.synchronize(h)
        want = float(sum(range(hvd.size())))
        if not torch.equal(out, torch.full((10,), want)):
            ok, error = 0, "%s: %s, expected %s" % (name, out.tolist(), want)
    if args.daemon_node >= 0:
        name = "health.daemon"
        if hvd.rank() == args.checker:
            node = node_status(args.daemon_node)
            assert node.get("state") == "ok", node
            os.kill(node["daemon_pid"], signal.SIGSTOP)
            started = time.time()
            h = hvd.allreduce_async(torch.full((10,), float(hvd.rank())), op=hvd.Sum, name=name)
            try:
                while True:
                    view = status().get("job", [])
                    others = [n for n in view if n.get("node", 0) != args.daemon_node and n.get("state") != "ok"]
                    assert not others, "other daemons not ok while node %d is stopped: %s" % (args.daemon_node, others)
                    node = next(n for n in view if n.get("node", 0) == args.daemon_node)
                    if node.get("state") == "unresponsive":
                        took = time.time() - started
                        print("daemon of node %d after %.1f s: %s" % (args.daemon_node, took, node.get("why")), flush=True)
                        assert took <= 5.0, "named after %.1f s (goal: 5 s)" % took
                        break
                    assert time.time() - started < 30, "the daemon was never called unresponsive: %s" % node
                    time.sleep(0.1)
            except AssertionError as e:
                ok, error = 0, str(e)
            os.kill(node["daemon_pid"], signal.SIGCONT)
        else:
            h = hvd.allreduce_async(torch.full((10,), float(hvd.rank())), op=hvd.Sum, name=name)
        out = hvd.synchronize(h)
        if not torch.equal(out, torch.full((10,), float(sum(range(hvd.size()))))):
            ok, error = 0, "%s: %s" % (name, out.tolist())
        if hvd.rank() == args.checker and ok:
            node = node_status(args.daemon_node)
            deadline = time.time() + 5
            while node.get("state") != "ok" and time.time() < deadline:
                time.sleep(0.1)
                node = node_status(args.daemon_node)
            if node.get("state") != "ok":
                ok, error = 0, "node %d still %s after SIGCONT: %s" % (args.daemon_node, node.get("state"), node)
    if error:
        print("health check failed: %s" % error, file=sys.stderr, flush=True)
    ok = int(hvd.allreduce(torch.tensor([ok]), op=hvd.Min, name="health.verdict").item())
    hvd.shutdown()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
