"""torch.distributed over syncd: rank 3 dies without detaching while the others wait in an
all_reduce (and DDP's backward), and the timeout given to init_process_group bounds a collective
a rank never joins. Every survivor must get a RuntimeError naming the cause, not hang."""
import datetime
import os
import time

import torch
import torch.distributed as dist

import syncd.torch.distributed  # noqa: F401
from report import report

dist.init_process_group("syncd", timeout=datetime.timedelta(seconds=5))
dist.all_reduce(torch.ones(4))
if dist.get_rank() == 3:
    time.sleep(0.3)
    os._exit(0)  # no shutdown: to the daemon this rank died
start = time.monotonic()
try:
    dist.all_reduce(torch.ones(1 << 16))
    report("no-error")
except RuntimeError as e:
    report("raised after %.1f s: %s" % (time.monotonic() - start, e))
