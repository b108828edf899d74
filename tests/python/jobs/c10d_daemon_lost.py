"""torch.distributed over syncd on 2 nodes x 2 ranks: node 1's daemon is killed (SIGKILL) while
ranks 1, 2 and 3 wait in an all_reduce and rank 0 in a recv from rank 2.
The init timeout is long (60 s): every rank must get a RuntimeError soon, naming the lost daemon
(ranks 2 and 3, whose daemon it was) or node 1 (ranks 0 and 1), not hang until it.
syncrun stops a job whose daemon died (SIGTERM, SIGKILL 3 s later); the ranks ignore SIGTERM to
show what they see before that, as under Slurm, where a prolog's daemon dying stops nothing."""
import datetime
import json
import os
import signal
import subprocess
import time

import torch
import torch.distributed as dist

import syncd.torch.distributed  # noqa: F401
from report import report


def own_daemon_pid():
    syncctl = os.path.join(os.environ["SYNCD_BIN_DIR"], "syncctl")
    out = subprocess.run([syncctl, "--run-dir", os.environ["SYNCD_RUN_DIR"], "status", "--json"], check=True,
                         capture_output=True, text=True).stdout
    s = json.loads(out)
    return next(n["daemon_pid"] for n in s["job"] if n.get("node", 0) == 1)


signal.signal(signal.SIGTERM, signal.SIG_IGN)
dist.init_process_group("syncd", timeout=datetime.timedelta(seconds=60))
r = dist.get_rank()
dist.all_reduce(torch.ones(4))
start = time.monotonic()
try:
    if r == 2:
        pid = own_daemon_pid()
        time.sleep(0.5)
        os.kill(pid, signal.SIGKILL)
    if r == 0:
        dist.recv(torch.zeros(16), src=2)
    else:
        dist.all_reduce(torch.ones(1 << 16))
    report("no-error")
except RuntimeError as e:
    report("raised after %.1f s: %s" % (time.monotonic() - start, e))
