"""Horovod's documented process-set pattern, unchanged: every rank adds the even and the odd set
and wraps its optimizer with process_set=even. Ranks outside the set train alone (their step()
communicates nothing and returns at once); the even ranks average over the set. A rank that
waits longer than the deadline is stopped with its stack (the test then fails, never hangs).

Each rank reports JSON: its weights' distance from the expected ones, and what calls naming a
set it is not in raised and how long they took."""
import copy
import faulthandler
import json
import time

import torch

import syncd.torch as hvd
from report import report

DEADLINE_S = 60
STEPS = 3

faulthandler.dump_traceback_later(DEADLINE_S, exit=True)
hvd.init()
n, me = hvd.size(), hvd.rank()
even = hvd.add_process_set([r for r in range(n) if r % 2 == 0])
odd = hvd.add_process_set([r for r in range(n) if r % 2 == 1])


def batch(rank, step):
    return torch.arange(8, dtype=torch.float32).reshape(2, 4) * (rank + 1) + step


torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1))
reference = copy.deepcopy(model)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05), named_parameters=model.named_parameters(),
                               process_set=even)
start = time.monotonic()
for step in range(STEPS):
    opt.zero_grad()
    model(batch(me, step)).sum().backward()
    opt.step()
train_s = time.monotonic() - start

# What the rank must hold: SGD on the average of the gradients of the ranks it trained with.
peers = even.ranks if even.included() else [me]
ref_opt = torch.optim.SGD(reference.parameters(), lr=0.05)
for step in range(STEPS):
    grads = []
    for r in peers:
        reference.zero_grad()
        reference(batch(r, step)).sum().backward()
        grads.append([p.grad.clone() for p in reference.parameters()])
    for i, p in enumerate(reference.parameters()):
        p.grad = sum(g[i] for g in grads) / len(peers)
    ref_opt.step()
error = max((a - b).abs().max().item() for a, b in zip(model.parameters(), reference.parameters()))

# Calls naming a set this rank is not in fail at once, naming the set and the rank.
refused = {}
outside = odd if even.included() else even
for what, call in [("allreduce", lambda: hvd.allreduce(torch.ones(2), process_set=outside)),
                   ("barrier", lambda: hvd.barrier(process_set=outside)),
                   ("broadcast_parameters", lambda: hvd.broadcast_parameters(model.state_dict(), 0,
                                                                             process_set=outside)),
                   ("allgather_object", lambda: hvd.allgather_object(me, process_set=outside))]:
    t0 = time.monotonic()
    try:
        call()
        refused[what] = "returned"
    except ValueError as e:
        refused[what] = {"seconds": time.monotonic() - t0, "message": str(e)}
hvd.barrier()
faulthandler.cancel_dump_traceback_later()
report(json.dumps({"rank": me, "in_even": bool(even.included()), "error": error, "train_s": train_s,
                   "refused": refused, "outside": outside.ranks}))
hvd.shutdown()
