"""Node 1's ranks (2 and 3) end without hvd.shutdown() while something still holds their client
(as a torch.distributed group or DDP in a reference cycle does: it then outlives the interpreter),
after the job's last collective together. At exit they say goodbye (syncd.torch's atexit), so to
the daemons they left, and node 0's ranks, still running, go on over a process set of their own.
A rank the daemons took for dead would have aborted the job on every node (logged as such,
counted as a loss)."""
import ctypes
import os
import sys
import time

import torch

import syncd.torch as hvd
from report import report



def running(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # exited once a zombie
    except OSError:
        return False


hvd.init()
pair = hvd.add_process_set([0, 1])
pids = hvd.allgather_object(os.getpid())  # the job's last collective together
if hvd.rank() >= 2:
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(hvd.basics._client_obj))  # never freed, not even at exit
    sys.exit(0)
deadline = time.monotonic() + 60
while any(running(p) for p in pids[2:]) and time.monotonic() < deadline:
    time.sleep(0.02)
time.sleep(0.2)  # the daemons have seen them go
x = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum, process_set=pair, name="after")
report("sum %g" % x.item())
hvd.shutdown()
