"""One task of a job on the test Slurm's node daemons (a node service): `steps` training steps
through syncd.torch, each an allreduce of a gradient-sized tensor that every rank checks exact,
then `<rank>: trained exact` on standard output. Another job runs beside it on the same daemons
(and may be cancelled meanwhile): nothing of it may show in these sums."""
import os
import sys
import time

import torch

import syncd.torch as hvd

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
hvd.init()
rank, size = hvd.rank(), hvd.size()
job = int(os.environ["SLURM_JOB_ID"])
base = torch.arange(4096, dtype=torch.float64)
for step in range(steps):
    g = base * (rank + 1) + step * job
    s = hvd.allreduce(g, op=hvd.Sum, name="grad")
    want = base * (size * (size + 1) // 2) + size * step * job
    if not torch.equal(s, want):
        print(f"{rank}: step {step}: wrong sum (first {s[0].item()}, want {want[0].item()})", file=sys.stderr)
        sys.exit(1)
    time.sleep(0.02)
hvd.shutdown()
print(f"{rank}: trained exact")
