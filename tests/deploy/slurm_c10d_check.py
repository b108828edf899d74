"""One task of `srun -N2 -n4` on the test Slurm, through torch.distributed: with nothing but
Slurm's variables and the task prolog's SYNCD_RUN_DIR (no RANK, MASTER_ADDR or MASTER_PORT),
dist.init_process_group("syncd") attaches to the daemon the prolog started; an all_reduce, a
send/recv ring across both nodes and a DDP step are exact."""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
    assert v not in os.environ, f"{v} is set: this check is about Slurm's variables alone"
import syncd.torch.distributed  # noqa: F401,E402  registers the backend (and fills them from Slurm's)
dist.init_process_group("syncd")
rank, size = dist.get_rank(), dist.get_world_size()
problems = []


def check(cond, what):
    if not cond:
        problems.append(what)


check(rank == int(os.environ["SLURM_PROCID"]) and size == int(os.environ["SLURM_NTASKS"]) == 4, f"rank {rank} of {size}")
x = torch.arange(100, dtype=torch.float64) * (rank + 1)
dist.all_reduce(x)
check(torch.equal(x, torch.arange(100, dtype=torch.float64) * 10), "all_reduce")
got = torch.zeros(3)
reqs = [dist.isend(torch.full((3,), float(rank)), dst=(rank + 1) % size), dist.irecv(got, src=(rank - 1) % size)]
for q in reqs:
    q.wait()
check(torch.equal(got, torch.full((3,), float((rank - 1) % size))), f"send/recv ring {got}")
torch.manual_seed(0)
model = nn.parallel.DistributedDataParallel(nn.Linear(4, 2))
model(torch.full((2, 4), float(rank))).sum().backward()
# The mean over ranks of each rank's gradient: d/dW of sum(W x + b) is the sum of x's rows.
check(torch.allclose(model.module.weight.grad, torch.full((2, 4), 2 * 1.5)), f"DDP gradient {model.module.weight.grad}")
dist.destroy_process_group()
if problems:
    print(f"rank {rank}: " + "; ".join(problems), file=sys.stderr)
    sys.exit(1)
print(f"rank {rank} of {size}: c10d exact")
