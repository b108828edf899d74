"""Checks identity when only Slurm's variables say who this task is (as under srun)."""
import os

import torch

import syncd.torch as hvd
from report import report

assert "SYNCD_RANK" not in os.environ and "SLURM_PROCID" in os.environ
hvd.init()
y = hvd.allreduce(torch.ones(2) * (hvd.rank() + 1), name="slurm", op=hvd.Sum)
report("%d %d %d %d %s" % (hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size(), y.tolist()))
hvd.shutdown()
