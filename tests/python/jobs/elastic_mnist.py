"""Horovod's elastic MNIST example (examples/elastic/pytorch/pytorch_mnist_elastic.py, in its form
with hvd.elastic.ElasticSampler), rewritten to the same API with `import syncd.torch as hvd`. No
network here: the dataset is synthetic, MNIST-shaped (1 x 28 x 28, ten classes, each class its own
pattern plus noise), so the model can learn it. A rank SIGKILLs itself in the middle of its
backward pass at a batch of an epoch (--die-rank, --die-at-epoch, --die-at-batch); under syncrun
--respawn its replacement (this script again, which then does not die) joins the others at their
next commit. Every rank that
finishes reports as JSON: its rank, size, launch rank, the test accuracy (averaged over the ranks),
and how many of the epoch's samples the survivors processed after the loss."""
import argparse
import json
import os
import signal
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data

import syncd.torch as hvd
from report import report
from syncd.torch import basics

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--lr", type=float, default=0.01)
parser.add_argument("--momentum", type=float, default=0.5)
parser.add_argument("--samples", type=int, default=1024)
parser.add_argument("--die-rank", type=int, default=-1)
parser.add_argument("--die-at-epoch", type=int, default=-1)
parser.add_argument("--die-at-batch", type=int, default=-1)
parser.add_argument("--sleep-ms", type=float, default=0, help="a pause in each batch (room for a replacement)")
parser.add_argument("--wait-for-size", type=int, default=0,
                    help="before the last epoch, wait (up to 120 s from the start) until the job has this many ranks")
args = parser.parse_args()
started_at = time.time()

hvd.init()
launch_rank = hvd.rank()
replacement = basics.client().replaces_lost_rank()
torch.manual_seed(42)
torch.set_num_threads(1)


def synthetic_mnist(n, seed):
    g = torch.Generator().manual_seed(seed)
    patterns = torch.randn(10, 1, 28, 28, generator=torch.Generator().manual_seed(7))
    labels = torch.randint(0, 10, (n,), generator=g)
    images = patterns[labels] + 0.8 * torch.randn(n, 1, 28, 28, generator=g)
    return torch.utils.data.TensorDataset(images, labels)


train_dataset = synthetic_mnist(args.samples, 1)
train_sampler = hvd.elastic.ElasticSampler(train_dataset, shuffle=True)
train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=args.batch_size, sampler=train_sampler)
test_dataset = synthetic_mnist(512, 2)
test_sampler = torch.utils.data.distributed.DistributedSampler(test_dataset, num_replicas=hvd.size(), rank=hvd.rank())
test_loader = torch.utils.data.DataLoader(test_dataset, batch_size=256, sampler=test_sampler)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        x = F.relu(self.fc1(x.view(-1, 320)))
        return F.log_softmax(self.fc2(x), dim=1)


model = Net()
optimizer = optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=args.momentum)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(), op=hvd.Average)
where = {"epoch": -1, "batch": -1}
processed_after_loss = [0]
lost = [False]


def die_mid_backward(grad):
    if (launch_rank == args.die_rank and (where["epoch"], where["batch"]) == (args.die_at_epoch, args.die_at_batch)
            and not replacement):
        os.kill(os.getpid(), signal.SIGKILL)
    return grad


model.conv1.weight.register_hook(die_mid_backward)


def metric_average(val, name):
    return hvd.allreduce(torch.tensor(val), name=name).item()


def wait_for_replacement(state):
    """Checks for new ranks every 100 ms while the job is smaller than --wait-for-size (rank 0's
    clock decides when to give up, so every rank stops waiting at the same check)."""
    while hvd.size() < args.wait_for_size and hvd.broadcast_object(time.time() - started_at < 120, root_rank=0):
        time.sleep(0.1)
        state.check_host_updates()


@hvd.elastic.run
def train(state):
    for state.epoch in range(state.epoch, args.epochs + 1):
        state.model.train()
        if state.epoch == args.epochs and state.batch == 0:
            wait_for_replacement(state)
        if state.batch == 0:  # a new epoch (after a reset mid-epoch the sampler holds what is left of it)
            state.train_sampler.set_epoch(state.epoch)
        for i, (data, target) in enumerate(train_loader):
            where.update(epoch=state.epoch, batch=state.batch)
            state.optimizer.zero_grad()
            loss = F.nll_loss(state.model(data), target)
            loss.backward()
            state.optimizer.step()
            time.sleep(args.sleep_ms / 1e3)
            state.train_sampler.record_batch(i, args.batch_size)
            if lost[0]:
                processed_after_loss[0] += len(data)
            state.batch += 1
            state.commit()
        state.batch = 0


def test():
    model.eval()
    correct, seen = 0.0, 0
    with torch.no_grad():
        for data, target in test_loader:
            correct += model(data).argmax(1).eq(target).float().sum().item()
            seen += len(target)
    return metric_average(correct / seen, "avg_accuracy")


def on_state_reset():
    lost[0] = True
    for param_group in optimizer.param_groups:
        param_group["lr"] = args.lr * hvd.size()


state = hvd.elastic.TorchState(model, optimizer, train_sampler=train_sampler, epoch=1, batch=0)
state.register_reset_callbacks([on_state_reset])
train(state)
accuracy = test()
report(json.dumps({"rank": hvd.rank(), "size": hvd.size(), "launch_rank": launch_rank, "accuracy": accuracy,
                   "processed_after_loss": processed_after_loss[0], "samples_per_rank": len(train_sampler),
                   "replacement": replacement}))
hvd.shutdown()
