"""torch.distributed over syncd, one node: rank 3 leaves the job cleanly (destroy_process_group,
then exits normally) while the others wait in a recv from it. The init timeout is long (60 s):
each survivor must get a RuntimeError naming rank 3 from the daemon once rank 3 has not attached
again within the daemon's grace period (2 s), not hang until the timeout."""
import datetime
import time

import torch
import torch.distributed as dist

import syncd.torch.distributed  # noqa: F401
from report import report

dist.init_process_group("syncd", timeout=datetime.timedelta(seconds=60))
dist.all_reduce(torch.ones(4))
r = dist.get_rank()
if r == 3:
    dist.send(torch.full((16,), 3.0), dst=0)  # one message that is taken before the departure
    dist.destroy_process_group()
    raise SystemExit(0)
start = time.monotonic()
try:
    if r == 0:
        first = torch.zeros(16)
        dist.recv(first, src=3)
        assert first.eq(3.0).all(), first
    dist.recv(torch.zeros(1 << 10), src=3)  # never sent
    report("no-error")
except RuntimeError as e:
    report("raised after %.1f s: %s" % (time.monotonic() - start, e))
