#!/usr/bin/python3
"""One rank of bench/compression.sh: a training step over a ResNet's gradient set, each method of
moving it timed over the same steps, and one JSON line from rank 0.

The step: a forward and backward pass whose only work is to produce every gradient of the model's
parameters (the gradient of parameter p is a fixed random tensor of p's shape, one multiply and one
copy per parameter), then the gradients' exchange as the method does it, then the optimizer's
step (SGD). So the step time is the exchange plus a small, equal amount of compute.

Methods (--method):
  none            syncd.torch DistributedOptimizer, Compression.none (gradients in the arena)
  fp16, bf16      the same, Compression.fp16 / .bf16: cast by the daemons on the inter-node hop
  topk            syncd's Compression.topk at --ratio, error feedback in the daemons
  onebit          syncd's Compression.onebit (signs, two values per 32 elements), error feedback in
                  the daemons
  powersgd        syncd's Compression.powersgd (rank --powersgd-rank, warm start, error feedback in
                  the daemons; tensors of one dimension uncompressed, as torch's hook)
  fp16-framework  Horovod's fp16: cast in this process before and after (a Compressor the daemon
                  does not take over), the half-precision gradients allreduced by syncd
  ddp             torch DistributedDataParallel over gloo (launched by bench/peers/on_links.sh)
  ddp-powersgd    the same with torch's powerSGD_hook (rank --powersgd-rank, warm start, error
                  feedback; PowerSGD from the third step on)
The rank's CPU time per step (time.process_time: this process's threads) is reported beside the
step time: syncd's compression runs on the daemon's cores, the framework's in the rank.
"""
import argparse
import json
import os
import statistics
import time

import torch
import torchvision

parser = argparse.ArgumentParser()
parser.add_argument("--method", required=True,
                    choices=["none", "fp16", "bf16", "topk", "onebit", "powersgd", "fp16-framework",
                             "ddp", "ddp-powersgd"])
parser.add_argument("--ratio", type=float, default=0.01, help="top-k's and random-k's share of the elements")
parser.add_argument("--model", default="resnet18", choices=["resnet18", "resnet50"])
parser.add_argument("--steps", type=int, default=5)
parser.add_argument("--warmup", type=int, default=3)
parser.add_argument("--powersgd-rank", type=int, default=4)
parser.add_argument("--label", default="")
args = parser.parse_args()
torch.set_num_threads(1)


class GradientSet(torch.nn.Module):
    """The model's parameters, and a forward pass whose backward gives each a fixed gradient."""

    def __init__(self, model):
        super().__init__()
        shapes = [p.shape for p in getattr(torchvision.models, model)().parameters()]
        g = torch.Generator().manual_seed(1)
        self.params = torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(s)) for s in shapes])
        self.grads = [torch.randn(s, generator=g) * 1e-2 for s in shapes]

    def forward(self):
        return sum((p * g).sum() for p, g in zip(self.params, self.grads))


def syncd_step_fn(net):
    import syncd.torch as hvd

    hvd.init()
    compression = {"none": hvd.Compression.none, "fp16": hvd.Compression.fp16, "bf16": hvd.Compression.bf16,
                   "topk": hvd.Compression.topk(args.ratio), "onebit": hvd.Compression.onebit, "powersgd": hvd.Compression.powersgd(args.powersgd_rank)}
    if args.method == "fp16-framework":
        class FrameworkFP16(hvd.Compression.fp16):  # Horovod's: compress() here, nothing for the daemon
            daemon = None
        chosen = FrameworkFP16
    else:
        chosen = compression[args.method]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=1e-3),
                                   named_parameters=net.named_parameters(), compression=chosen)

    def step():
        opt.zero_grad()
        net().backward()
        opt.step()
    return step, hvd.rank(), hvd.size(), hvd.cross_size(), hvd.allreduce


def ddp_step_fn(net):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    model = DDP(net, bucket_cap_mb=4096) if args.method == "ddp-powersgd" else DDP(net)
    if args.method == "ddp-powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
        state = powersgd.PowerSGDState(process_group=None, matrix_approximation_rank=args.powersgd_rank,
                                       start_powerSGD_iter=2, warm_start=True, use_error_feedback=True)
        model.register_comm_hook(state, powersgd.powerSGD_hook)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad()
        model().backward()
        opt.step()

    def mean(t, name=None):
        dist.all_reduce(t)
        return t / dist.get_world_size()
    nodes = int(os.environ.get("SYNCD_CROSS_SIZE", "0")) or None
    return step, dist.get_rank(), dist.get_world_size(), nodes, mean


net = GradientSet(args.model)
step, rank, size, nodes, mean = (ddp_step_fn if args.method.startswith("ddp") else syncd_step_fn)(net)
for _ in range(args.warmup):
    step()
times, cpu = [], []
for _ in range(args.steps):
    c0, t0 = time.process_time(), time.perf_counter()
    step()
    times.append(time.perf_counter() - t0)
    cpu.append(time.process_time() - c0)
# Every rank's median, averaged (the slowest rank sets the pace: the medians hardly differ).
step_ms = mean(torch.tensor([statistics.median(times) * 1e3], dtype=torch.float64), name="bench.step").item()
cpu_ms = mean(torch.tensor([statistics.median(cpu) * 1e3], dtype=torch.float64), name="bench.cpu").item()
if rank == 0:
    nbytes = sum(p.numel() * 4 for p in net.parameters())
    print(json.dumps({"bench": "compression", "method": args.method, "model": args.model, "ranks": size,
                      "nodes": nodes, "gradient_bytes": nbytes, "steps": args.steps, "step_ms": round(step_ms, 2),
                      "rank_cpu_ms": round(cpu_ms, 2), "label": args.label}), flush=True)
