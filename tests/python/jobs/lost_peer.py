"""Rank 3 dies without detaching while the others wait in an allreduce: every survivor must get
HorovodInternalError (not hang, not crash)."""
import os
import time

import torch

import syncd.torch as hvd
from report import report

hvd.init()
hvd.allreduce(torch.ones(4), name="warmup")
if hvd.rank() == 3:
    time.sleep(0.3)
    os._exit(0)  # no shutdown: to the daemon this rank died
try:
    hvd.allreduce(torch.ones(1 << 16), name="orphaned")
    report("no-error")
except hvd.HorovodInternalError as e:
    report("raised %s: %s" % (e.status, e))
