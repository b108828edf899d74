"""torch.distributed over syncd: rank 1 never joins a collective the others call; the timeout
given to init_process_group (3 s) ends their wait with an error naming it."""
import datetime
import time

import torch
import torch.distributed as dist

import syncd.torch.distributed  # noqa: F401
from report import report

dist.init_process_group("syncd", timeout=datetime.timedelta(seconds=3))
dist.all_reduce(torch.ones(4))
start = time.monotonic()
if dist.get_rank() != 1:
    try:
        dist.all_reduce(torch.ones(8))
        report("no-error")
    except RuntimeError as e:
        report("raised after %.1f s: %s" % (time.monotonic() - start, e))
        # The request stays in flight in the daemon: leaving now would fail the other rank's (as
        # "rank N detached while the collective was in flight") before its own timeout.
        time.sleep(1.5)
else:
    time.sleep(5)
    report("skipped")
