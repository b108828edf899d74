"""One rank of a small training job; writes its final parameters to <out>/rank<r>.pt.

    train_steps.py OUT STEPS [cuda] [metric] [fp16|topk|powersgd]

cuda: the model and its gradients on the GPU (deterministic kernels). metric: each step also
averages the loss, a tensor outside the TOPO plan. fp16, topk, powersgd: DistributedOptimizer(
compression=Compression.fp16, .topk(0.05), .powersgd(rank=2)). Used by test_jobs.py to compare
--coord modes: the same job must end bit-identical."""
import json
import os
import subprocess
import sys

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS, before torch loads it
import torch

import syncd.torch as hvd
from report import report

out = sys.argv[1]
steps = int(sys.argv[2])
cuda = "cuda" in sys.argv[3:]
metric = "metric" in sys.argv[3:]
compression = {"fp16": hvd.Compression.fp16, "topk": hvd.Compression.topk(0.05),
               "powersgd": hvd.Compression.powersgd(rank=2)}
compression = next((compression[a] for a in sys.argv[3:] if a in compression), hvd.Compression.none)
hvd.init()
torch.manual_seed(0)
device = torch.device("cuda") if cuda else torch.device("cpu")
if cuda:
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
model = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                            torch.nn.Linear(4 * 6 * 6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 10)).to(device)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                               named_parameters=model.named_parameters(), compression=compression)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
for step in range(steps):
    g = torch.Generator().manual_seed(step * 100 + hvd.rank())
    x, y = torch.randn(8, 1, 8, 8, generator=g), torch.randint(0, 10, (8,), generator=g)
    x, y = x.to(device), y.to(device)
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    if metric:
        hvd.allreduce(loss.detach(), name="loss")
torch.save({k: v.cpu() for k, v in model.state_dict().items()}, os.path.join(out, "rank%d.pt" % hvd.rank()))
info = {"rank": hvd.rank(), "mode": hvd.coord_mode(),
        "plan_hash": opt._recorder.plan_hash if opt._recorder is not None else None}
if hvd.local_rank() == 0:
    status = subprocess.run([os.path.join(os.environ["SYNCD_BIN_DIR"], "syncctl"), "--run-dir",
                             os.environ["SYNCD_RUN_DIR"], "status", "--json"], capture_output=True, text=True)
    info["status"] = json.loads(status.stdout)
report(json.dumps(info))
hvd.shutdown()
