"""Naming an unresponsive rank within 5 s, run on every rank of a syncrun job:

    syncrun [-N NODES] -n RANKS -- python3 health_job.py --rank R --checker C   (R and C on one node)

Phase 1: rank R stops itself (SIGSTOP) before an allreduce the others have submitted; rank C's
`syncctl status --json` must call R unresponsive ("stopped") within 5 s, then C sends SIGCONT.
Phase 2: rank R spins outside syncd (a busy loop, as a hung data loader or a long Python step
would) while the others wait in an allreduce; status must say R has not called syncd while a
tensor waits for it, its process running, within 5 s; C then lets R go on. Both allreduces must
then complete with every rank's data. Every rank exits with C's verdict.
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


def client_status(rank):
    syncctl = os.path.join(os.environ["SYNCD_BIN_DIR"], "syncctl")
    out = subprocess.run([syncctl, "--run-dir", os.environ["SYNCD_RUN_DIR"], "status", "--json"], check=True,
                         capture_output=True, text=True).stdout
    return next(c for c in json.loads(out)["clients"] if c["rank"] == rank)


def wait_unresponsive(rank, words, started):
    """Seconds from `started` until status names `rank` unresponsive with `words` in the reason."""
    while time.time() - started < 30:
        c = client_status(rank)
        if words in c.get("unresponsive", ""):
            print("rank %d after %.1f s: %s (last seen %.1f s ago, process %s)" % (
                rank, time.time() - started, c["unresponsive"], c["last_seen_s"], c["process"]), flush=True)
            return time.time() - started, c
        time.sleep(0.1)
    raise AssertionError("status never called rank %d unresponsive (%r); last: %s" % (rank, words, c))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--checker", type=int, required=True)
    args = parser.parse_args()
    hvd.init()
    go = os.path.join(os.environ["SYNCD_RUN_DIR"], "health.go")
    for i in range(3):
        hvd.allreduce(torch.ones(10), name="health.warmup")
    hvd.barrier()
    ok, error = 1, ""
    for phase, words in (("stop", "stopped"), ("spin", "not calling syncd")):
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
    if error:
        print("health check failed: %s" % error, file=sys.stderr, flush=True)
    ok = int(hvd.allreduce(torch.tensor([ok]), op=hvd.Min, name="health.verdict").item())
    hvd.shutdown()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
