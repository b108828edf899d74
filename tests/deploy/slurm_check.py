"""One task of `srun -N2 -n4` on the test Slurm: syncd.torch attaches to the daemon the prolog
started (SYNCD_RUN_DIR from the task prolog), the identity is Slurm's, the results are exact, and
the task runs off the daemon's cores."""
import os
import sys

import torch

import syncd.torch as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()
problems = []


def check(cond, what):
    if not cond:
        problems.append(what)


check(rank == int(os.environ["SLURM_PROCID"]), f"rank {rank} != SLURM_PROCID {os.environ['SLURM_PROCID']}")
check(size == int(os.environ["SLURM_NTASKS"]) == 4, f"size {size}")
check(hvd.local_rank() == int(os.environ["SLURM_LOCALID"]), f"local rank {hvd.local_rank()}")
check(hvd.cross_size() == 2, f"cross size {hvd.cross_size()}")
check(os.environ.get("SYNCD_RUN_DIR", "").endswith(os.environ["SLURM_JOB_ID"] + "." + os.environ["SLURMD_NODENAME"]),
      f"SYNCD_RUN_DIR {os.environ.get('SYNCD_RUN_DIR')}")
workers = {int(c) for c in os.environ.get("SYNCD_WORKER_CORES", "").split(",") if c}
check(workers and os.sched_getaffinity(0) <= workers, f"affinity {os.sched_getaffinity(0)} not within {workers}")

x = torch.arange(1000, dtype=torch.float64) * (rank + 1)
s = hvd.allreduce(x, op=hvd.Sum, name="slurm.sum")
check(torch.equal(s, torch.arange(1000, dtype=torch.float64) * 10), "allreduce sum")
a = hvd.allreduce(torch.full((7, 3), float(rank)), name="slurm.avg")
check(torch.equal(a, torch.full((7, 3), 1.5)), f"allreduce average {a[0, 0]}")
b = hvd.broadcast(torch.full((5,), rank, dtype=torch.int64), root_rank=3, name="slurm.bcast")
check(torch.equal(b, torch.full((5,), 3, dtype=torch.int64)), f"broadcast {b}")
hvd.shutdown()
if problems:
    print(f"rank {rank}: " + "; ".join(problems), file=sys.stderr)
    sys.exit(1)
print(f"rank {rank} of {size}: exact")
