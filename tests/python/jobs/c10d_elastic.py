"""DDP over torch.distributed's syncd backend through a lost rank, as a torch user writes it: the
default group made with init_method="syncd://"; a collective that fails (restore) or
ranks_changed() at a step boundary (continue; a replacement waiting) makes the survivors destroy
the group and make it again over the job's live ranks, renumbered, at the new world size, and
build DDP again on it (which broadcasts rank 0's parameters). Under restore the step in flight is
rolled back to the parameters the ranks last agreed on.

Rank --die-rank SIGKILLs itself (--kill-daemon: its node's syncd, so every rank of the node is
lost) in its backward pass at step --die-at-step (not as a replacement); --also-die-rank
SIGKILLs itself at --also-die-at-step.
Each rank's data is constant and its own: every element of rank r's input at step s is
r + 1 + s, so the gradient DDP averages is known: batch x the members' mean of r + 1 + s. Every
step records whether the gradient it applied is that mean over the group's ranks at the time
(a wrong divisor, a lost rank's contribution, or a rank counted twice all break it). With --ops,
after training every rank checks each torch.distributed operation among the renumbered ranks.
Every rank that finishes reports as JSON."""
import argparse
import copy
import datetime
import hashlib
import json
import os
import signal
import time
import types

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import syncd.torch.distributed as sdist
from node_daemon import daemon_pid
from report import report
from syncd.torch import basics

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=12)
parser.add_argument("--die-rank", type=int, default=-1)
parser.add_argument("--die-at-step", type=int, default=-1)
parser.add_argument("--kill-daemon", action="store_true", help="the victim SIGKILLs its node's syncd instead")
parser.add_argument("--also-die-rank", type=int, default=-1, help="another rank SIGKILLs itself (not its daemon)")
parser.add_argument("--also-die-at-step", type=int, default=-1)
parser.add_argument("--sleep-ms", type=float, default=0, help="a pause in each step (room for a replacement)")
parser.add_argument("--wait-for-size", type=int, default=0,
                    help="past --steps, go on (up to 120 s from the start) until the group has this many ranks")
parser.add_argument("--ops", action="store_true", help="check every operation among the renumbered ranks")
args = parser.parse_args()

BATCH, WIDTH = 4, 8
TIMEOUT = datetime.timedelta(seconds=30)


def init():
    dist.init_process_group("syncd", init_method="syncd://", timeout=TIMEOUT)
    return DDP(model)


torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Linear(WIDTH, 1, bias=False)
ddp = init()
launch_rank = basics.client().rank
replacement = basics.client().replaces_lost_rank()
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
committed = copy.deepcopy(model.state_dict())
step, current_step, reinits, checked = 0, -1, 0, []
started_at = time.time()


def die_mid_backward(grad):
    if launch_rank == args.die_rank and current_step == args.die_at_step and not replacement:
        with open(os.path.join(os.environ["SYNCD_TEST_RESULTS"], "killed.txt"), "w") as f:
            f.write(json.dumps({"killed_at": time.time()}))
        os.kill(daemon_pid() if args.kill_daemon else os.getpid(), signal.SIGKILL)
    if launch_rank == args.also_die_rank and current_step == args.also_die_at_step and not replacement:
        os.kill(os.getpid(), signal.SIGKILL)
    return grad


model.weight.register_hook(die_mid_backward)


def live_launch_ranks():
    return [basics.launch_rank(r) for r in range(dist.get_world_size())]


def train_step(s):
    optimizer.zero_grad()
    x = torch.full((BATCH, WIDTH), float(launch_rank + 1 + s))
    ddp(x).sum().backward()
    members = live_launch_ranks()
    expected = BATCH * (sum(r + 1 for r in members) / len(members) + s)
    # DDP divides each rank's gradient by the world size before summing: float32 rounding only.
    ok = bool(torch.allclose(model.weight.grad, torch.full_like(model.weight.grad, expected), rtol=1e-6, atol=0))
    optimizer.step()
    return ok


def take_step_from_rank_0():
    global step
    where = [step]
    dist.broadcast_object_list(where, src=0)
    step = where[0]


def again():
    """The group made again over the live ranks; the step from rank 0 (a replacement has none)."""
    global ddp, reinits
    dist.destroy_process_group()
    ddp = init()
    reinits += 1
    take_step_from_rank_0()


def more_steps():
    """Below --steps; past them while a replacement is awaited (rank 0 decides for every rank, so
    that all stop at the same step)."""
    if step < args.steps:
        return True
    if dist.get_world_size() >= args.wait_for_size:
        return False
    go_on = [time.time() - started_at < 120]
    dist.broadcast_object_list(go_on, src=0)
    return go_on[0]


if replacement:
    take_step_from_rank_0()  # its init met the others' check: they made the group again, with it
while True:
    try:
        # Past --steps the wait's broadcast may be what a replacement's node coming back fails (4 x 1:
        # its node lost every rank, and taking it back fails what is in flight on every rank).
        if not more_steps():
            break
        current_step = step
        ok = train_step(step)
        time.sleep(args.sleep_ms / 1e3)
        if sdist.ranks_changed():
            checked.append((step, ok, False))  # the step in flight when a rank was lost (continue)
            step += 1
            committed = copy.deepcopy(model.state_dict())
            again()
            continue
        checked.append((step, ok, True))
        step += 1
        committed = copy.deepcopy(model.state_dict())
    except RuntimeError as e:  # restore: a collective without the lost rank failed on every survivor;
        # continue: a lost node taken back failed the collective in flight
        if "syncd" not in str(e):
            raise
        model.load_state_dict(committed)
        again()


# Every operation among the renumbered ranks, each checked against what the live ranks'
# numbering says it must give; `g`: this rank's view (rank, n, the live launch ranks lr, its own
# launch rank as a float me, the roots' rank root).
def op_broadcast(g):
    t = torch.tensor([g.me])
    dist.broadcast(t, src=g.root)
    return t.item() == g.lr[g.root]


def op_all_reduce(g):
    t = torch.tensor([g.me + 1])
    dist.all_reduce(t)
    return t.item() == sum(r + 1 for r in g.lr)


def op_all_gather(g):
    outs = [torch.zeros(2) for _ in range(g.n)]
    dist.all_gather(outs, torch.tensor([g.me, g.me]))
    return [o[0].item() for o in outs] == g.lr


def op_reduce(g):
    t = torch.tensor([g.me + 1])
    dist.reduce(t, dst=g.root, op=dist.ReduceOp.MAX)
    return g.rank != g.root or t.item() == max(g.lr) + 1


def op_gather(g):
    gathered = [torch.zeros(1) for _ in range(g.n)] if g.rank == g.root else None
    dist.gather(torch.tensor([g.me]), gathered, dst=g.root)
    return g.rank != g.root or [x.item() for x in gathered] == g.lr


def op_scatter(g):
    out = torch.zeros(1)
    dist.scatter(out, [torch.tensor([float(r * 10)]) for r in g.lr] if g.rank == g.root else None, src=g.root)
    return out.item() == g.me * 10


def op_reduce_scatter(g):
    out = torch.zeros(1)
    dist.reduce_scatter(out, [torch.tensor([g.me + 100 * q]) for q in range(g.n)])
    return out.item() == sum(g.lr) + 100 * g.rank * g.n


def op_all_to_all_single(g):
    out = torch.zeros(g.n)
    dist.all_to_all_single(out, torch.tensor([g.me * 10 + q for q in range(g.n)], dtype=torch.float32))
    return out.tolist() == [r * 10 + g.rank for r in g.lr]


def op_send_recv(g):
    got = torch.zeros(1)
    for w in [dist.isend(torch.tensor([g.me]), (g.rank + 1) % g.n), dist.irecv(got, (g.rank - 1) % g.n)]:
        w.wait()
    return got.item() == g.lr[(g.rank - 1) % g.n]


def op_recv_any_source(g):
    if g.rank != 0:
        dist.send(torch.tensor([g.me]), 0)
        return True
    got = torch.zeros(1)
    return sorted(dist.recv(got) for _ in range(g.n - 1)) == list(range(1, g.n))


def op_new_group(g):
    # Group ranks 0 and n-1 (a syncd process set of their launch ranks): a sum and a broadcast
    # from its second rank.
    ends = dist.new_group([0, g.n - 1], backend="syncd")
    if g.rank not in (0, g.n - 1):
        return True
    t = torch.tensor([g.me + 1])
    dist.all_reduce(t, group=ends)
    b = torch.tensor([g.me])
    dist.broadcast(b, src=g.n - 1, group=ends)
    return t.item() == g.lr[0] + g.lr[g.n - 1] + 2 and b.item() == g.lr[g.n - 1]


def check_ops():
    """Each op_ above by name: True, False, or the error it raised."""
    n = dist.get_world_size()
    g = types.SimpleNamespace(rank=dist.get_rank(), n=n, lr=live_launch_ranks(), me=float(launch_rank), root=n - 1)
    results = {}
    for name, op in [(k, v) for k, v in globals().items() if k.startswith("op_")]:
        try:
            results[name[3:]] = op(g)
        except (RuntimeError, ValueError) as e:
            results[name[3:]] = str(e)
    dist.barrier()
    return results


ops = check_ops() if args.ops else {}
digest = hashlib.sha256(model.weight.detach().numpy().tobytes()).hexdigest()
report(json.dumps({"rank": dist.get_rank(), "size": dist.get_world_size(), "launch_rank": launch_rank,
                   "members": live_launch_ranks(), "reinits": reinits, "replacement": replacement,
                   "steps": step, "checked": checked, "digest": digest, "ops": ops,
                   "set_ranks": basics.client().job_set_ranks(),
                   "started_at": started_at}))
ddp = None  # DDP holds the group, the group this process's attachment: both go, and it detaches
dist.destroy_process_group()
