"""One rank of bench/elastic.sh's training job (syncd.torch, Horovod's API).

    elastic_job.py OUT --steps N [--victim R --kill-step K] [--checkpoint PATH] [--resume] [--elastic]
                   [--model cnn|resnet18]

Each step trains on a fixed batch per rank and records when it ended. Rank R SIGKILLs itself in
the middle of its backward pass at step K, first writing the time to OUT/killed. With
--checkpoint, rank 0 saves the model, the optimizer and the step after every step (written to a
temporary file, then renamed, as a careful user does); with --resume every rank loads it, rank 0's
parameters are broadcast, and training goes on from the step after it. With --elastic the loop is
Horovod's elastic one (hvd.elastic.run over a TorchState of the model, the optimizer and the step,
committed after every step); under syncrun --respawn the victim's replacement (this script again,
which then does not die) joins at the others' next commit. With --kill-daemon the victim SIGKILLs
its node's syncd instead (under syncrun --restart-daemons the node's ranks attach to the new one). Each surviving rank writes OUT/rank<r>.json (r: its launch rank): its
step numbers and their end times, and (with --resume) when it started."""
import argparse
import hashlib
import json
import os
import signal
import sys
import time

t_start = time.time()  # before torch loads: a restart's cost includes the import
import torch  # noqa: E402

import syncd.torch as hvd  # noqa: E402
from syncd.torch import basics  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--steps", type=int, required=True)
p.add_argument("--victim", type=int, default=-1)
p.add_argument("--kill-step", type=int, default=-1)
p.add_argument("--checkpoint")
p.add_argument("--resume", action="store_true")
p.add_argument("--elastic", action="store_true")
p.add_argument("--model", default="cnn", choices=["cnn", "resnet18"])
p.add_argument("--kill-daemon", action="store_true", help="the victim SIGKILLs its node's syncd instead of itself")
a = p.parse_args()

hvd.init()
launch_rank = hvd.rank()  # hvd.elastic renumbers the survivors
replacement = basics.client().replaces_lost_rank()  # syncrun --respawn started it after the victim died
torch.manual_seed(0)
torch.set_num_threads(1)
if a.model == "resnet18":
    import torchvision
    model = torchvision.models.resnet18(num_classes=10)
    shape = (4, 3, 32, 32)
else:
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.ReLU(), torch.nn.Conv2d(16, 16, 3), torch.nn.ReLU(),
                                torch.nn.Flatten(), torch.nn.Linear(16 * 28 * 28, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 10))
    shape = (8, 3, 32, 32)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
                               named_parameters=model.named_parameters())
first = 0
if a.resume:
    saved = torch.load(a.checkpoint)
    model.load_state_dict(saved["model"])
    opt.load_state_dict(saved["optimizer"])
    first = saved["step"] + 1
if not a.elastic:  # hvd.elastic.run syncs the state from rank 0 itself (a replacement's too)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
step = first


def node_daemon():
    """The pid of the syncd serving this rank's run directory (its command line names it)."""
    wanted = os.environ["SYNCD_RUN_DIR"].encode()
    for pid in (d for d in os.listdir("/proc") if d.isdigit()):
        try:
            argv = open("/proc/%s/cmdline" % pid, "rb").read().split(b"\0")
        except OSError:
            continue
        if argv[0].endswith(b"/syncd") and wanted in argv:
            return int(pid)
    sys.exit("elastic_job.py: no syncd serves %s" % wanted.decode())


killed = []


def die_mid_backward(grad):
    # Once: with --kill-daemon the victim lives on, rolls back and passes the kill step again.
    if launch_rank == a.victim and step == a.kill_step and not replacement and not killed:
        killed.append(True)
        with open(os.path.join(a.out, "killed"), "w") as f:
            f.write(repr(time.time()))
        os.kill(node_daemon() if a.kill_daemon else os.getpid(), signal.SIGKILL)
    return grad


next(model.parameters()).register_hook(die_mid_backward)  # the first layer's gradient comes last
g = torch.Generator().manual_seed(launch_rank)
x, y = torch.randn(*shape, generator=g), torch.randint(0, 10, (shape[0],), generator=g)
steps, ends = [], []


def train_step():
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    steps.append(step)
    ends.append(time.time())


if a.elastic:
    @hvd.elastic.run
    def train(state):
        global step
        while state.step < first + a.steps:
            step = state.step
            train_step()
            state.step += 1
            state.commit()

    train(hvd.elastic.TorchState(model, opt, step=first))
else:
    for step in range(first, first + a.steps):
        train_step()
        if a.checkpoint and hvd.rank() == 0:
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step},
                       a.checkpoint + ".tmp")
            os.replace(a.checkpoint + ".tmp", a.checkpoint)
# The parameters (not the buffers: batch norm's running statistics are each rank's own, as in Horovod).
digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()
with open(os.path.join(a.out, "rank%d.json" % launch_rank), "w") as f:
    json.dump({"rank": launch_rank, "steps": steps, "ends": ends, "started": t_start, "replacement": replacement,
               "digest": digest}, f)
hvd.shutdown()
