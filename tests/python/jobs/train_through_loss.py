"""A Horovod training job (syncd.torch, DistributedOptimizer, a small CNN, fixed seeds) that loses
a rank and goes on: run it under `syncrun --on-loss continue`.

    train_through_loss.py STEPS VICTIM KILL_STEP

Rank VICTIM SIGKILLs itself in the middle of its backward pass at step KILL_STEP (after the last
layers' gradients were submitted, before the first layer's), first writing the time to
$SYNCD_TEST_RESULTS/killed. Every survivor trains all STEPS and reports as JSON: the digest of
its parameters, hvd.size(), and the time of each step's end (to find its first step after the
kill)."""
import hashlib
import json
import os
import signal
import sys
import time

import torch

import syncd.torch as hvd
from report import report

steps, victim, kill_step = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
hvd.init()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                            torch.nn.Linear(4 * 6 * 6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 10))
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                               named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
step = 0


def die_mid_backward(grad):
    if hvd.rank() == victim and step == kill_step:
        with open(os.path.join(os.environ["SYNCD_TEST_RESULTS"], "killed"), "w") as f:
            f.write(repr(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)
    return grad


model[0].weight.register_hook(die_mid_backward)  # the first layer's gradient comes last
ends, losses = [], []
for step in range(steps):
    g = torch.Generator().manual_seed(hvd.rank())  # each rank's own batch, every step: the loss must fall
    x, y = torch.randn(8, 1, 8, 8, generator=g), torch.randint(0, 10, (8,), generator=g)
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    losses.append(hvd.allreduce(loss.detach(), name="loss").item())  # Average over the ranks summed
    ends.append(time.time())
digest = hashlib.sha256(b"".join(v.numpy().tobytes() for v in model.state_dict().values())).hexdigest()
report(json.dumps({"rank": hvd.rank(), "size": hvd.size(), "digest": digest, "ends": ends, "losses": losses}))
hvd.shutdown()
