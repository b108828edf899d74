"""dist.init_process_group("syncd") when only Slurm's variables say who this task is (srun with
syncd's prolog): syncd.torch.distributed fills in torch's env:// variables."""
import os

import torch
import torch.distributed as dist

assert "RANK" not in os.environ and "MASTER_ADDR" not in os.environ and "SLURM_PROCID" in os.environ
import syncd.torch.distributed  # noqa: F401,E402
from report import report  # noqa: E402

dist.init_process_group("syncd")
y = torch.ones(2) * (dist.get_rank() + 1)
dist.all_reduce(y)
report("%d %d %s %s" % (dist.get_rank(), dist.get_world_size(), os.environ["MASTER_ADDR"], y[0].item()))
dist.destroy_process_group()
