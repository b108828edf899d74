#!/usr/bin/python3
"""Trains a small convolutional network on scikit-learn's bundled digits through syncd.

Run it as the quickstart does:
    syncrun -N 2 -n 4 -- /usr/bin/python3 deploy/local/train_digits.py
Each rank trains on its shard of the training set with syncd.torch's DistributedOptimizer;
rank 0 prints per-epoch loss, held-out accuracy and samples/s. At the end each daemon's
`syncctl status` is shown while its ranks are still attached.

Under load imbalance (--delay-ms 50,200: each step one rank, drawn with a seed every rank shares,
sleeps that long) compare synchronous training with eager-SGD's partial allreduce:
    --partial solo|majority [--full-sync-every N]   (bench/partial_training.sh runs all three)
With --compression fp16|bf16 the gradients' inter-node hop is compressed by the daemons
(bench/compression.sh compares the held-out accuracy). With --op adasum the DistributedOptimizer
reduces the ranks' updates with Adasum (Horovod's op=Adasum; the learning rate is not scaled by the
number of ranks).
"""
import argparse
import json
import os
import random
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import syncd.torch as hvd


class DigitsNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 4 * 4, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.02, help="per rank; scaled by the number of ranks")
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--min-accuracy", type=float, default=0.95, help="exit 1 below this held-out accuracy")
    parser.add_argument("--partial", choices=["solo", "majority"], help="eager-SGD's partial allreduce")
    parser.add_argument("--full-sync-every", type=int, default=0, help="with --partial: average the models every N steps")
    parser.add_argument("--delay-ms", default="", help="LO,HI: each step one rank (the same on every rank) sleeps "
                                                       "uniformly LO..HI ms before its forward pass")
    parser.add_argument("--compression", choices=["none", "fp16", "bf16", "topk", "randomk", "onebit", "powersgd"],
                        default="none",
                        help="the DistributedOptimizer's compression (hvd.Compression)")
    parser.add_argument("--op", choices=["average", "adasum"], default="average",
                        help="how the DistributedOptimizer combines the ranks (hvd.Average, hvd.Adasum)")
    parser.add_argument("--ratio", type=float, default=0.01, help="top-k's and random-k's share of the elements")
    parser.add_argument("--seed", type=int, default=1234, help="the model's initial parameters")
    parser.add_argument("--json", action="store_true", help="rank 0 prints one JSON line at the end")
    parser.add_argument("--no-status", action="store_true", help="do not show syncctl status at the end")
    args = parser.parse_args()
    delay = [float(v) for v in args.delay_ms.split(",")] if args.delay_ms else None

    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(digits.target, dtype=torch.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
    shard = slice(hvd.rank(), None, hvd.size())  # every rank its own part of the training set
    x_train, y_train = x_train[shard], y_train[shard]

    model = DigitsNet()
    compression = getattr(hvd.Compression, args.compression)
    if args.compression in ("topk", "randomk"):
        compression = compression(args.ratio)
    elif args.compression == "powersgd":
        compression = compression(4)
    adasum = args.op == "adasum"
    lr = args.lr if adasum else args.lr * hvd.size()  # Adasum combines updates: no scaling (Horovod's advice)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr, momentum=args.momentum),
                                         named_parameters=model.named_parameters(), partial=args.partial,
                                         compression=compression, op=hvd.Adasum if adasum else hvd.Average,
                                         full_sync_every=args.full_sync_every if args.partial else 0)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    if hvd.rank() == 0:
        print("syncd.torch: %d ranks on %d nodes (coord %s), %d training / %d held-out digits" %
              (hvd.size(), hvd.cross_size(), hvd.coord_mode(), len(y) - len(y_test), len(y_test)), flush=True)
        print("%5s %10s %10s %12s" % ("epoch", "loss", "accuracy", "samples/s"), flush=True)

    accuracy, loss, steps, train_s, naps, skipped = 0.0, 0.0, 0, 0.0, [], 0
    straggler = random.Random(4321)  # the same draws on every rank
    for epoch in range(1, args.epochs + 1):
        model.train()
        order = torch.randperm(len(y_train), generator=torch.Generator().manual_seed(epoch * 100 + hvd.rank()))
        start, loss_sum, seen = time.perf_counter(), 0.0, 0
        for i in range(0, len(order), args.batch_size):
            idx = order[i:i + args.batch_size]
            if delay and straggler.randrange(hvd.size()) == hvd.rank():
                time.sleep(straggler.uniform(*delay) / 1000.0)  # a straggler: slow input or forward pass
            elif delay:
                straggler.uniform(*delay)  # keep the draws in step on every rank
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
            loss.backward()
            optimizer.step()
            steps += 1
            if args.partial:
                naps.append(optimizer.partial_info.nap)
                skipped += optimizer.partial_info.round != steps  # late beyond the daemon's kept results
            loss_sum += loss.item() * len(idx)
            seen += len(idx)
        elapsed = time.perf_counter() - start
        train_s += elapsed
        if args.partial and epoch == args.epochs:
            optimizer.average_parameters()  # the model that is evaluated: every rank's average
        model.eval()
        with torch.no_grad():
            correct = (model(x_test).argmax(1) == y_test).sum().item()
        totals = hvd.allreduce(torch.tensor([loss_sum, seen, elapsed], dtype=torch.float64), op=hvd.Sum,
                               name="epoch_stats")
        accuracy, loss = correct / len(y_test), (totals[0] / totals[1]).item()
        if hvd.rank() == 0:
            print("%5d %10.4f %9.2f%% %12.0f" % (epoch, loss, 100 * accuracy,
                                                 totals[1] / (totals[2] / hvd.size())), flush=True)

    # Each daemon's status while its ranks are attached, node by node.
    bindir = os.environ.get("SYNCD_BIN_DIR")
    for node in range(0 if args.no_status else hvd.cross_size()):
        if bindir and hvd.cross_rank() == node and hvd.local_rank() == 0:
            print("\n== syncctl status, node %d (%s)" % (node, os.environ["SYNCD_RUN_DIR"]), flush=True)
            subprocess.run([os.path.join(bindir, "syncctl"), "--run-dir", os.environ["SYNCD_RUN_DIR"], "status"])
            sys.stdout.flush()
        hvd.barrier()
    # Step time: every rank's mean (seconds of training over steps), averaged over ranks.
    step_ms = hvd.allreduce(torch.tensor([1000.0 * train_s / max(steps, 1)], dtype=torch.float64), name="step_ms")
    if hvd.rank() == 0:
        print("\nheld-out accuracy %.2f%% (goal at least %.0f%%)" % (100 * accuracy, 100 * args.min_accuracy))
        if args.json:
            print(json.dumps({"bench": "digits", "mode": args.partial or "synchronous", "ranks": hvd.size(),
                              "nodes": hvd.cross_size(), "epochs": args.epochs, "steps": steps,
                              "step_ms": round(step_ms.item(), 2), "accuracy_pct": round(100 * accuracy, 2),
                              "final_loss": round(loss, 5), "compression": args.compression, "seed": args.seed,
                              "op": args.op,
                              "mean_nap": round(sum(naps) / len(naps), 2) if naps else hvd.size(),
                              "delay_ms": args.delay_ms, "full_sync_every": args.full_sync_every,
                              "rounds_skipped_rank0": skipped}), flush=True)
    hvd.shutdown()
    sys.exit(0 if accuracy >= args.min_accuracy else 1)


if __name__ == "__main__":
    main()
