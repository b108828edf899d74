"""torch.distributed over syncd: rank 3 dies without detaching while the others wait in a recv,
from it (ranks 0 and 2) or from anyone (rank 1). The init timeout is long (60 s): each survivor
must get a RuntimeError naming rank 3 from the daemons, soon, not hang until it."""
import datetime
import os
import time

import torch
import torch.distributed as dist

import syncd.torch.distributed  # noqa: F401
from report import report

dist.init_process_group("syncd", timeout=datetime.timedelta(seconds=60))
dist.all_reduce(torch.ones(4))
r = dist.get_rank()
if r == 3:
    time.sleep(0.5)
    os._exit(0)  # no shutdown: to the daemon this rank died
start = time.monotonic()
try:
    t = torch.zeros(1 << 10)
    if r == 1:
        dist.recv(t)  # any source
    else:
        dist.recv(t, src=3)
    report("no-error")
except RuntimeError as e:
    report("raised after %.1f s: %s" % (time.monotonic() - start, e))
