"""Horovod's elastic synthetic benchmark (examples/elastic/pytorch/pytorch_synthetic_benchmark_elastic.py),
rewritten to the same API with `import syncd.torch as hvd`, small enough for a CPU test, and with
a rank that SIGKILLs itself in the middle of its backward pass at an iteration (--die-rank,
--die-at-iter; with --kill-daemon it SIGKILLs its node's daemon instead, and so loses every rank
of its node; under syncrun --restart-daemons they attach to the daemon started in its place).
Under syncrun --respawn the dead rank's replacement (the same script again) joins the others at
their next commit: it does not die, and reports too. The victim writes the time of its death to
killed.txt beside the results. Every rank that finishes reports as JSON: its rank and size after
the job, its launch rank, the learning rate the reset callback set, how many resets it saw, the
iterations it timed and the digest of its parameters."""
import argparse
import hashlib
import json
import os
import signal
import time
import timeit

import torch
import torch.nn.functional as F
import torch.optim as optim

import syncd.torch as hvd
from node_daemon import daemon_pid
from report import report
from syncd.torch import basics

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, default=8)
parser.add_argument("--num-warmup-batches", type=int, default=2)
parser.add_argument("--num-batches-per-iter", type=int, default=3)
parser.add_argument("--num-iters", type=int, default=8)
parser.add_argument("--num-batches-per-commit", type=int, default=1)
parser.add_argument("--die-rank", type=int, default=-1)
parser.add_argument("--die-at-iter", type=int, default=-1)
parser.add_argument("--kill-daemon", action="store_true")
parser.add_argument("--sleep-ms", type=float, default=0, help="a pause in each step (room for a replacement)")
parser.add_argument("--grow-file", help="syncrun --host-discovery-script's hosts file: rank 0 writes --grow-hosts "
                    "to it at --grow-at-iter (syncrun --max-np then starts ranks in the slots offered)")
parser.add_argument("--grow-hosts", default="", help="comma-separated NODE:SLOTS")
parser.add_argument("--grow-at-iter", type=int, default=-1)
parser.add_argument("--ops", action="store_true", help="after training, check the collectives that take or give "
                    "something per rank in the ranks' numbering since the reset")
parser.add_argument("--wait-for-size", type=int, default=0,
                    help="before the last iteration, wait (up to 120 s from the start) until the job has this many ranks")
args = parser.parse_args()
started_at = time.time()

hvd.init()
launch_rank = basics.client().rank
start_size = hvd.size()
replacement = basics.client().replaces_lost_rank()
torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                            torch.nn.Linear(8 * 30 * 30, 10))


def lr_scaler():
    return hvd.size()


lr = 0.01
optimizer = optim.SGD(model.parameters(), lr=lr * lr_scaler())
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                     compression=hvd.Compression.none, op=hvd.Average)
data = torch.randn(args.batch_size, 3, 32, 32, generator=torch.Generator().manual_seed(launch_rank))
target = torch.LongTensor(args.batch_size).random_(generator=torch.Generator().manual_seed(launch_rank)) % 10
current_iter = -1
killed = [False]


def die_mid_backward(grad):
    if launch_rank == args.die_rank and current_iter == args.die_at_iter and not killed[0] and not replacement:
        killed[0] = True
        with open(os.path.join(os.environ["SYNCD_TEST_RESULTS"], "killed.txt"), "w") as f:
            f.write(json.dumps({"killed_at": time.time()}))
        os.kill(daemon_pid() if args.kill_daemon else os.getpid(), signal.SIGKILL)
    return grad


model[0].weight.register_hook(die_mid_backward)


first_step_at = []


def benchmark_step(state):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(data), target)
    loss.backward()
    optimizer.step()
    time.sleep(args.sleep_ms / 1e3)
    if not first_step_at:
        first_step_at.append(time.time())
    state.batch += 1
    if state.batch == args.num_batches_per_commit:
        state.batch = 0
        state.commit()


def wait_for_replacement(state):
    """Checks for new ranks every 100 ms while the job is smaller than --wait-for-size (rank 0's
    clock decides when to give up, so every rank stops waiting at the same check). A loaded
    machine may start a replacement only after the survivors' last iteration."""
    while hvd.size() < args.wait_for_size and hvd.broadcast_object(time.time() - started_at < 120, root_rank=0):
        time.sleep(0.1)
        state.check_host_updates()


@hvd.elastic.run
def run_benchmark(state):
    global current_iter
    if not state.warm:
        timeit.timeit(lambda: benchmark_step(state), number=args.num_warmup_batches)
        state.warm = True
        state.commit()
    for x in range(state.iter, args.num_iters):
        current_iter = x
        if x == args.grow_at_iter and args.grow_file and launch_rank == 0 and not replacement:
            with open(args.grow_file + ".tmp", "w") as f:
                f.write("\n".join(args.grow_hosts.split(",")) + "\n")
            os.replace(args.grow_file + ".tmp", args.grow_file)
        if x == args.num_iters - 1:
            wait_for_replacement(state)
        time = timeit.timeit(lambda: benchmark_step(state), number=args.num_batches_per_iter)
        state.img_secs.append(args.batch_size * args.num_batches_per_iter / time)
        state.iter = x
        state.commit()


resets = 0


def on_state_reset():
    global resets
    resets += 1
    for param_group in optimizer.param_groups:
        param_group["lr"] = lr * lr_scaler()


def check_ops():
    """Each collective that names ranks, as Horovod numbers them after the reset (rank r of n,
    launch ranks lr): True, False, or the error it raised."""
    n, r, lr = hvd.size(), hvd.rank(), [basics.launch_rank(q) for q in range(hvd.size())]
    me = float(launch_rank)

    def alltoall_splits():
        # rank r sends q + 1 rows of value 100 * me + q to rank q; it gets r + 1 rows from each
        t = torch.cat([torch.full((q + 1, 2), 100 * me + q) for q in range(n)])
        out, got = hvd.alltoall(t, splits=[q + 1 for q in range(n)], name="ops.alltoall_splits")
        want = torch.cat([torch.full((r + 1, 2), 100.0 * s + r) for s in lr])
        return got.tolist() == [r + 1] * n and torch.equal(out, want)

    def alltoall_equal():
        out = hvd.alltoall(torch.tensor([10 * me + q for q in range(n)]), name="ops.alltoall_equal")
        return out.tolist() == [10.0 * s + r for s in lr]

    def reducescatter():
        # 2n + 1 rows of row index + launch rank: rank r keeps its share (the first ranks one more)
        t = torch.arange(2 * n + 1, dtype=torch.float32).unsqueeze(1) + me
        out = hvd.reducescatter(t, op=hvd.Sum, name="ops.reducescatter")
        first = sum(2 + (q < 1) for q in range(r))
        rows = 2 + (r < 1)
        return out.squeeze(1).tolist() == [n * i + sum(lr) for i in range(first, first + rows)]

    def allgather():
        return hvd.allgather(torch.tensor([me]), name="ops.allgather").tolist() == [float(s) for s in lr]

    def broadcast():
        return hvd.broadcast(torch.tensor([me]), root_rank=n - 1, name="ops.broadcast").item() == lr[n - 1]

    def params_min_max():
        # What a user checks after a loss: the survivors hold the same parameters, so their Min and
        # Max are those parameters (a lost rank standing in with zeros made Min 0 for every
        # positive element and Max 0 for every negative one).
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        lo = hvd.allreduce(flat, op=hvd.Min, name="ops.params_min")
        hi = hvd.allreduce(flat, op=hvd.Max, name="ops.params_max")
        return torch.equal(lo, flat) and torch.equal(hi, flat)

    def product():
        out = hvd.allreduce(torch.tensor([2.0, -1.0, me + 1]), op=hvd.Product, name="ops.product")
        want = [2.0 ** n, (-1.0) ** n, float(torch.tensor([s + 1.0 for s in lr]).prod())]
        return out.tolist() == want

    results = {}
    for name, op in [("alltoall_splits", alltoall_splits), ("alltoall_equal", alltoall_equal),
                     ("reducescatter", reducescatter), ("allgather", allgather), ("broadcast", broadcast),
                     ("params_min_max", params_min_max), ("product", product)]:
        try:
            results[name] = op()
        except (RuntimeError, ValueError) as e:
            results[name] = str(e)
    return results


state = hvd.elastic.TorchState(model, optimizer, img_secs=[], iter=0, batch=0, warm=False)
state.register_reset_callbacks([on_state_reset])
run_benchmark(state)
ops = check_ops() if args.ops else {}
digest = hashlib.sha256(b"".join(v.numpy().tobytes() for v in model.state_dict().values())).hexdigest()
report(json.dumps({"rank": hvd.rank(), "size": hvd.size(), "launch_rank": launch_rank, "resets": resets,
                   "start_size": start_size,
                   "lr": optimizer.param_groups[0]["lr"], "iters": len(state.img_secs), "digest": digest,
                   "ops": ops,
                   "replacement": replacement, "first_step_at": first_step_at[0],
                   # attached again to its restarted daemon (syncrun --restart-daemons)
                   "attached_again": basics.client().replaces_lost_rank() and not replacement}))
hvd.shutdown()
