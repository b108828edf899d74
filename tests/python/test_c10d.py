"""syncd as a torch.distributed backend (dist.init_process_group("syncd")), on every rank of a
syncrun job (ctest runs it on 1 node x 4 ranks and 2 nodes x 2). Every collective is checked
against gloo's result on the same inputs, in the same job (a gloo group over the same ranks), and
DDP training against DDP over gloo. Collectives first, assertions after, so a failure on one rank
never leaves the others waiting."""

import copy
import datetime
import os
import re
import time

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn

pytest.importorskip("syncd._c10d", reason="syncd was built without libtorch-dev")
import syncd.torch.distributed  # noqa: F401,E402  registers the backend
from syncd.torch import Compression  # noqa: E402
from syncd.torch.distributed import CompressionState, compression_hook  # noqa: E402

DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
          torch.float32, torch.float64, torch.bool]
OPS = {"SUM": dist.ReduceOp.SUM, "PRODUCT": dist.ReduceOp.PRODUCT, "MIN": dist.ReduceOp.MIN,
       "MAX": dist.ReduceOp.MAX}
GLOO = None


@pytest.fixture(scope="module", autouse=True)
def job():
    global GLOO
    dist.init_process_group("syncd", timeout=datetime.timedelta(seconds=60))
    GLOO = dist.new_group(backend="gloo")
    yield
    dist.destroy_process_group()


def rank_input(r, dtype, n=7):
    i = torch.arange(n, dtype=torch.int64)
    if dtype == torch.bool:
        return ((i + r) % 3 == 0)
    # Small values: products of 4 ranks stay exact in every dtype (float16 included).
    return ((i + 2 * r) % 3 + 1).to(dtype)


def both(fn, *tensors):
    """Runs fn(tensors, group) over syncd (default group) and over gloo on copies; returns both."""
    mine = [t.clone() for t in tensors]
    theirs = [t.clone() for t in tensors]
    fn(mine, None)
    fn(theirs, GLOO)
    return mine, theirs


def test_the_backend_is_syncd_and_ranks_come_from_the_environment():
    assert dist.get_backend() == "syncd"
    import syncd.torch as hvd
    assert dist.get_rank() == hvd.rank() and dist.get_world_size() == hvd.size()


# gloo (torch 1.13) reduces these; int16, bfloat16 and bool it refuses ("Invalid scalar type").
GLOO_DTYPES = {torch.uint8, torch.int8, torch.int32, torch.int64, torch.float16, torch.float32, torch.float64}


def reference(op, dtype):
    """What every rank must get: the reduction of every rank's input, computed here."""
    xs = [rank_input(r, dtype) for r in range(dist.get_world_size())]
    if dtype == torch.bool:  # logical, as torch.distributed: SUM/MAX any, MIN/PRODUCT all
        stack = torch.stack(xs)
        return stack.any(0) if op in ("SUM", "MAX") else stack.all(0)
    out = xs[0].clone()
    for x in xs[1:]:
        out = {"SUM": torch.add, "PRODUCT": torch.mul, "MIN": torch.minimum, "MAX": torch.maximum}[op](out, x)
    return out


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", list(OPS))
def test_allreduce_every_dtype_and_op_matches_gloo(dtype, op):
    x = rank_input(dist.get_rank(), dtype)
    mine = x.clone()
    dist.all_reduce(mine, op=OPS[op])
    theirs = None
    if dtype in GLOO_DTYPES:
        theirs = x.clone()
        dist.all_reduce(theirs, op=OPS[op], group=GLOO)
    assert mine.dtype == dtype and torch.equal(mine, reference(op, dtype)), (mine, reference(op, dtype))
    assert theirs is None or torch.equal(mine, theirs), (mine, theirs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32], ids=str)
def test_allreduce_average_is_the_mean(dtype):
    x = rank_input(dist.get_rank(), dtype)
    mine = x.clone()
    dist.all_reduce(mine, op=dist.ReduceOp.AVG)
    total = sum(rank_input(r, torch.float64) for r in range(dist.get_world_size()))
    want = (total / dist.get_world_size()).to(dtype) if dtype.is_floating_point else \
        torch.div(total.to(torch.int64), dist.get_world_size(), rounding_mode="trunc").to(dtype)
    assert torch.equal(mine, want), (mine, want)


def test_allreduce_of_non_contiguous_and_scalar_tensors():
    r = dist.get_rank()
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4) + r
    view = base.t()  # non-contiguous
    scalar = torch.tensor(float(r))
    dist.all_reduce(view)
    dist.all_reduce(scalar)
    n = dist.get_world_size()
    want = (torch.arange(12, dtype=torch.float32).reshape(3, 4) * n + sum(range(n))).t()
    assert torch.equal(view, want) and torch.equal(base, want.t())
    assert scalar.item() == sum(range(n))


def test_allreduce_coalesced_matches_gloo():
    r = dist.get_rank()
    ts = [rank_input(r, torch.float32, 5), rank_input(r, torch.float32, 300)]
    mine, theirs = both(lambda xs, g: dist.all_reduce_coalesced(xs, group=g), *ts)
    assert all(torch.equal(a, b) for a, b in zip(mine, theirs))


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int64, torch.float16, torch.float32], ids=str)
def test_broadcast_from_every_root_matches_gloo(dtype):
    results = []
    for root in range(dist.get_world_size()):
        x = rank_input(dist.get_rank() * 5 + root, dtype, 9)
        results.append(both(lambda ts, g: dist.broadcast(ts[0], src=root, group=g), x))
    for root, (mine, theirs) in enumerate(results):
        assert torch.equal(mine[0], theirs[0]), (root, mine[0], theirs[0])
        assert torch.equal(mine[0], rank_input(root * 5 + root, dtype, 9))


@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.float16, torch.float64], ids=str)
def test_allgather_and_allgather_base_match_gloo(dtype):
    n, r = dist.get_world_size(), dist.get_rank()
    x = rank_input(r, dtype, 6).reshape(2, 3)
    mine = [torch.zeros_like(x) for _ in range(n)]
    theirs = [torch.zeros_like(x) for _ in range(n)]
    dist.all_gather(mine, x)
    dist.all_gather(theirs, x, group=GLOO)
    flat = torch.zeros(n * 2, 3, dtype=dtype)
    dist._all_gather_base(flat, x)
    assert all(torch.equal(a, b) for a, b in zip(mine, theirs))
    assert torch.equal(flat, torch.cat(theirs))


@pytest.mark.filterwarnings("ignore:torch.distributed.all_gather_coalesced will be deprecated")
def test_allgather_coalesced_matches_gloo():
    n, r = dist.get_world_size(), dist.get_rank()
    inputs = [torch.full((2, 3), float(r)), torch.arange(5, dtype=torch.float32) * (r + 1), torch.tensor([float(-r)])]
    def outs():
        return [[torch.zeros_like(t) for t in inputs] for _ in range(n)]
    mine, theirs = outs(), outs()
    dist.all_gather_coalesced(mine, inputs)
    dist.all_gather_coalesced(theirs, inputs, group=GLOO)
    for q in range(n):
        assert torch.equal(mine[q][0], torch.full((2, 3), float(q)))
        assert torch.equal(mine[q][1], torch.arange(5, dtype=torch.float32) * (q + 1))
        for a, b in zip(mine[q], theirs[q]):
            assert torch.equal(a, b)


def test_async_work_wait_is_completed_and_future():
    n = dist.get_world_size()
    a, b = torch.ones(4), torch.ones(4)
    wa = dist.all_reduce(a, async_op=True)
    wb = dist.all_reduce(b, async_op=True)
    fut = wb.get_future()
    wa.wait()
    got = fut.wait()
    assert wa.is_completed() and wb.is_completed()
    assert torch.equal(a, torch.full((4,), float(n))) and torch.equal(got[0], torch.full((4,), float(n)))
    # (Work.exception() has no Python binding in torch 1.13, for any backend: a failure shows as
    # wait() raising, tested below.)


def test_barrier_waits_for_every_rank():
    r = dist.get_rank()
    time.sleep(0.2 * r)
    t0 = time.monotonic()
    dist.barrier()
    waited = time.monotonic() - t0
    # The last rank to arrive hardly waits; rank 0 waits for it.
    if r == 0:
        assert waited >= 0.2 * (dist.get_world_size() - 1) - 0.05, waited


def test_a_collective_that_times_out_says_timed_out_and_the_group_goes_on():
    # torch's tests and users' retry code match "Timed out|closed|timeout" in the message.
    r = dist.get_rank()
    group = dist.new_group(backend="syncd", timeout=datetime.timedelta(seconds=1))
    t0 = time.monotonic()
    if r != 0:
        with pytest.raises(RuntimeError) as caught:
            dist.barrier(group=group)  # rank 0 is not there yet
        waited = time.monotonic() - t0
    dist.barrier(group=GLOO)  # rank 0 waits for the others' timeouts ...
    if r == 0:
        dist.barrier(group=group)  # ... then completes their barrier in the daemons
    dist.barrier(group=GLOO)
    x = torch.ones(2)
    dist.all_reduce(x, group=group)  # the group goes on: names still agree
    dist.destroy_process_group(group)
    assert torch.equal(x, torch.full((2,), float(dist.get_world_size())))
    if r != 0:
        assert re.search("Timed out|closed|timeout", str(caught.value)), caught.value
        assert "Timed out after 1000 ms waiting for BARRIER" in str(caught.value), caught.value
        assert 0.9 <= waited < 5.0, waited


# A sparse all_reduce, as gloo's: every rank's entries summed, the input becomes the coalesced sum.
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64], ids=str)
@pytest.mark.parametrize("sparse_dims", [1, 2], ids=["rows", "elements"])
def test_sparse_all_reduce_matches_gloo(dtype, sparse_dims):
    n, r = dist.get_world_size(), dist.get_rank()

    def rank_tensor(q):
        # Rows q, q + 1 and 9 of a 10 x 3 tensor (rank 0's twice: uncoalesced), rank 1's empty.
        rows = [] if q == 1 else [q, q + 1, 9] + ([q] if q == 0 else [])
        values = torch.arange(len(rows) * 3).reshape(-1, 3).to(dtype) + q
        if sparse_dims == 1:
            return torch.sparse_coo_tensor(torch.tensor([rows], dtype=torch.int64), values, (10, 3))
        idx = torch.tensor([[i for i in rows for _ in range(3)], [c for _ in rows for c in range(3)]],
                           dtype=torch.int64).reshape(2, -1)
        return torch.sparse_coo_tensor(idx, values.reshape(-1), (10, 3))

    mine, theirs = rank_tensor(r), rank_tensor(r)
    dist.all_reduce(mine)
    dist.all_reduce(theirs, group=GLOO)
    work = dist.all_reduce(async_in := rank_tensor(r), async_op=True)
    work.wait()
    want = sum(rank_tensor(q).to_dense() for q in range(n))
    assert mine.is_sparse and mine.is_coalesced() and mine.sparse_dim() == sparse_dims
    assert torch.equal(mine.to_dense(), theirs.to_dense()) and torch.equal(mine.to_dense(), want)
    assert torch.equal(async_in.to_dense(), want)


def test_sparse_all_reduce_errors_raise_on_every_rank_and_never_wait():
    n, r = dist.get_world_size(), dist.get_rank()
    x = torch.ones(4, 2).to_sparse(1)
    with pytest.raises(RuntimeError, match="SUM only"):
        dist.all_reduce(x.clone(), op=dist.ReduceOp.MAX)
    # The last rank's tensor is larger: every rank fails naming a rank whose tensor differs.
    bad = torch.ones(5 if r == n - 1 else 4, 2).to_sparse(1)
    with pytest.raises(RuntimeError, match=r"allreduce of a sparse tensor: rank \d's tensor differs"):
        dist.all_reduce(bad)
    # Rank 0 passes a dense tensor where the others pass sparse ones: all fail, none waits.
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="mismatched"):
        dist.all_reduce(torch.ones(4, 2) if r == 0 else x.clone())
    assert time.monotonic() - t0 < 10
    y = torch.ones(3)
    dist.all_reduce(y)
    assert torch.equal(y, torch.full((3,), float(n)))


def test_hvd_shutdown_refuses_while_a_syncd_group_is_alive():
    import syncd.torch as hvd
    with pytest.raises(RuntimeError, match="destroy_process_group"):
        hvd.shutdown()
    x = torch.ones(2)
    dist.all_reduce(x)  # still attached
    assert x[0].item() == dist.get_world_size()


def test_unsupported_ops_raise_naming_the_op():
    with pytest.raises(RuntimeError, match="BAND"):
        dist.all_reduce(torch.ones(2, dtype=torch.int32), op=dist.ReduceOp.BAND)
    with pytest.raises(RuntimeError, match="cannot send to itself"):
        dist.send(torch.ones(2), dst=dist.get_rank())
    with pytest.raises(RuntimeError, match="send of a sparse tensor is not supported"):
        dist.send(torch.ones(2).to_sparse(), dst=(dist.get_rank() + 1) % dist.get_world_size())
    # Complex sums work: torch.distributed hands them over as pairs of reals.
    z = torch.full((2,), 1 + 2j, dtype=torch.complex64)
    dist.all_reduce(z)
    assert torch.equal(z, torch.full((2,), (1 + 2j) * dist.get_world_size(), dtype=torch.complex64))


def test_a_mismatched_collective_raises_on_every_rank():
    # Rank 0 allreduces 3 elements where the others allreduce 4: every rank's work fails,
    # naming the mismatch, and the job goes on.
    x = torch.ones(3 if dist.get_rank() == 0 else 4)
    with pytest.raises(RuntimeError, match="mismatched shape"):
        dist.all_reduce(x)
    y = torch.ones(2)
    dist.all_reduce(y)
    assert torch.equal(y, torch.full((2,), float(dist.get_world_size())))


def train(ddp, steps, seed, no_sync_every=0):
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    gen = torch.Generator().manual_seed(seed)
    for step in range(steps):
        opt.zero_grad()
        x = torch.randn(16, 10, generator=gen)
        y = torch.randint(0, 3, (16,), generator=gen)
        if no_sync_every and step % no_sync_every == 0:
            # Gradient accumulation: one micro-batch without communication, one with.
            with ddp.no_sync():
                nn.functional.cross_entropy(ddp(x[:8]), y[:8]).backward()
            nn.functional.cross_entropy(ddp(x[8:]), y[8:]).backward()
        else:
            nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()


class WithUnused(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.unused = nn.Linear(10, 20), nn.Linear(20, 3), nn.Linear(20, 3)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


@pytest.mark.parametrize("variant", ["plain", "find_unused_parameters", "no_sync", "fp16_compress_hook",
                                     "syncd_compression_hook_fp16"])
def test_ddp_trains_to_the_same_parameters_as_ddp_over_gloo(variant):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    torch.manual_seed(0)
    model = WithUnused() if variant == "find_unused_parameters" else \
        nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 3))
    twin = copy.deepcopy(model)
    kw = {"find_unused_parameters": True} if variant == "find_unused_parameters" else {}
    ddp = nn.parallel.DistributedDataParallel(model, **kw)
    ref = nn.parallel.DistributedDataParallel(twin, process_group=GLOO, **kw)
    if variant == "fp16_compress_hook":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
        ref.register_comm_hook(GLOO, default_hooks.fp16_compress_hook)
    if variant == "syncd_compression_hook_fp16":  # the daemons cast, between nodes only
        ddp.register_comm_hook(Compression.fp16, compression_hook)
        ref.register_comm_hook(GLOO, default_hooks.fp16_compress_hook)
    seed = 100 + dist.get_rank()
    train(ddp, 6, seed, no_sync_every=2 if variant == "no_sync" else 0)
    train(ref, 6, seed, no_sync_every=2 if variant == "no_sync" else 0)
    # fp16 gradients: the daemon and gloo add the halves in different orders (2e-5 apart here).
    atol = 1e-4 if "fp16" in variant else 1e-6
    for (name, a), b in zip(model.named_parameters(), twin.parameters()):
        assert torch.allclose(a, b, atol=atol, rtol=1e-5), (variant, name, (a - b).abs().max())


class Dot(nn.Module):
    """loss = w . x: its gradient is x, whatever w is."""

    def __init__(self, n):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(n, dtype=torch.float64))

    def forward(self, x):
        return (self.w * x).sum()


@pytest.mark.parametrize("method", ["none", "topk"])
def test_ddp_compression_hook_keeps_error_feedback_per_bucket(method):
    """ddp.register_comm_hook(Compression.topk(0.25), compression_hook): each bucket averaged by the
    daemons, top-k with error feedback between nodes. Integer gradients for 4 steps, then
    zeros until the residuals have crossed: SGD at lr 1 from zeros ends at minus the average of every
    rank's gradients, exactly, as uncompressed (a residual lost would leave most of it out)."""
    n, steps = 5000, 4
    compression, drain = {"none": (Compression.none, 0),
                          "topk": (CompressionState(Compression.topk(0.25)), 4)}[method]
    model = Dot(n)
    ddp = nn.parallel.DistributedDataParallel(model)
    ddp.register_comm_hook(compression, compression_hook)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)

    def grad(step, r):
        return (torch.arange(n, dtype=torch.float64) % 7 + 1) * (r + 1) * (step + 3) % 11 - 5

    for step in range(steps + drain):
        opt.zero_grad()
        ddp(grad(step, dist.get_rank()) if step < steps else torch.zeros(n, dtype=torch.float64)).backward()
        opt.step()
    want = -sum(grad(step, r) for step in range(steps) for r in range(dist.get_world_size())) / dist.get_world_size()
    assert torch.equal(model.w.detach(), want), (method, (model.w.detach() - want).abs().max())


class Affine(nn.Module):
    """loss = w . x + b . y: the gradients are x (a matrix) and y."""

    def __init__(self, rows, cols):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(rows, cols, dtype=torch.float64))
        self.b = nn.Parameter(torch.zeros(rows, dtype=torch.float64))

    def forward(self, x, y):
        return (self.w * x).sum() + (self.b * y).sum()


def test_ddp_compression_hook_factors_each_matrix_under_powersgd():
    """Compression.powersgd(2) through compression_hook: each gradient of the bucket on its own, the
    matrix as two rank-2 factors with error feedback, the bias as it is (exact every step). SGD at lr
    1 from zeros for 4 steps of integer gradients; then what the daemons hold of the matrix is handed
    over (an allreduce of zeros under its name with top-k at ratio 1): w ends at minus the average of
    every rank's gradients within 1e-12."""
    rows, cols, steps, world = 16, 40, 4, dist.get_world_size()
    model = Affine(rows, cols)
    ddp = nn.parallel.DistributedDataParallel(model)
    ddp.register_comm_hook(Compression.powersgd(2), compression_hook)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)

    def grad(step, r, n):
        return (torch.arange(n, dtype=torch.float64) % 7 + 1) * (r + 1) * (step + 3) % 11 - 5

    for step in range(steps):
        opt.zero_grad()
        r = dist.get_rank()
        ddp(grad(step, r, rows * cols).reshape(rows, cols), grad(step, r, rows) + 1).backward()
        opt.step()
        want_b = -sum(grad(s, q, rows) + 1 for s in range(step + 1) for q in range(world)) / world
        assert torch.equal(model.b.detach(), want_b), step
    want_w = -sum(grad(s, q, rows * cols) for s in range(steps) for q in range(world)).reshape(rows, cols) / world
    if int(os.environ.get("SYNCD_CROSS_SIZE", "1")) > 1:  # the matrix crossed the nodes as factors
        assert not torch.equal(model.w.detach(), want_w)
    # One bucket (index 0) of both gradients, in whichever order DDP put them: the hand-over asks
    # for the matrix under each place; the name that is not it hands over nothing.
    pg = dist.distributed_c10d._get_default_group()
    held = torch.zeros(rows * cols, dtype=torch.float64)
    for place in (0, 1):
        zeros = torch.zeros(rows * cols, dtype=torch.float64)
        name = "ddp.bucket.0.%d.%d.%d" % (rows * cols + rows, place, rows * cols)
        pg.allreduce_named(zeros, name, Compression.topk(1.0).daemon).wait()
        held += zeros
    final = model.w.detach() - held.reshape(rows, cols)
    assert (final - want_w).norm() <= 1e-12 * want_w.norm(), (final - want_w).norm()


def test_compression_hook_refuses_a_group_of_another_backend():
    model = Dot(10)
    ddp = nn.parallel.DistributedDataParallel(model, process_group=GLOO)
    ddp.register_comm_hook(CompressionState(Compression.fp16, GLOO), compression_hook)
    with pytest.raises(Exception, match="needs a process group of the 'syncd' backend"):
        ddp(torch.ones(10, dtype=torch.float64)).backward()


@pytest.mark.parametrize("dtype", [torch.int32, torch.float32], ids=str)
@pytest.mark.parametrize("op", ["SUM", "MAX"])
def test_reduce_to_every_root_matches_gloo(dtype, op):
    results = []
    for root in range(dist.get_world_size()):
        x = rank_input(dist.get_rank() + root, dtype, 5)
        results.append(both(lambda ts, g: dist.reduce(ts[0], dst=root, op=OPS[op], group=g), x))
    for root, (mine, theirs) in enumerate(results):
        if dist.get_rank() == root:
            assert torch.equal(mine[0], theirs[0]), (root, mine[0], theirs[0])
        else:  # syncd's reduce leaves the other ranks' tensors as they were
            assert torch.equal(mine[0], rank_input(dist.get_rank() + root, dtype, 5)), (root, mine[0])


def test_gather_and_scatter_to_and_from_every_root_match_gloo():
    n, r = dist.get_world_size(), dist.get_rank()
    for root in range(n):
        x = rank_input(r * 3 + root, torch.float32, 4)
        mine = [torch.zeros(4) for _ in range(n)] if r == root else None
        theirs = [torch.zeros(4) for _ in range(n)] if r == root else None
        dist.gather(x, mine, dst=root)
        dist.gather(x, theirs, dst=root, group=GLOO)
        pieces = [rank_input(root * 7 + i, torch.float32, 4) for i in range(n)] if r == root else None
        out_mine, out_theirs = torch.zeros(4), torch.zeros(4)
        dist.scatter(out_mine, pieces, src=root)
        dist.scatter(out_theirs, [p.clone() for p in pieces] if pieces else None, src=root, group=GLOO)
        if r == root:
            assert all(torch.equal(a, b) for a, b in zip(mine, theirs)), (root, mine, theirs)
        assert torch.equal(out_mine, out_theirs) and torch.equal(out_mine, rank_input(root * 7 + r, torch.float32, 4))


@pytest.mark.parametrize("op", ["SUM", "AVG", "MIN", "MAX", "PRODUCT"])
def test_reduce_scatter_and_its_base_form(op):
    n, r = dist.get_world_size(), dist.get_rank()
    ins = [rank_input(r + 2 * i, torch.float32, 6) for i in range(n)]
    out = torch.zeros(6)
    dist.reduce_scatter(out, [t.clone() for t in ins], op=getattr(dist.ReduceOp, op))
    base = torch.zeros(6)
    dist._reduce_scatter_base(base, torch.cat(ins), op=getattr(dist.ReduceOp, op))
    # Rank r gets the reduction over every rank q of q's r-th input.
    xs = [rank_input(q + 2 * r, torch.float32, 6) for q in range(n)]
    want = xs[0].clone()
    for x in xs[1:]:
        want = {"SUM": torch.add, "AVG": torch.add, "MIN": torch.minimum, "MAX": torch.maximum,
                "PRODUCT": torch.mul}[op](want, x)
    if op == "AVG":
        want = want / n
    assert torch.allclose(out, want) and torch.allclose(base, want), (op, out, base, want)


def test_alltoall_and_alltoall_base_match_gloo():
    n, r = dist.get_world_size(), dist.get_rank()
    # Uneven: rank r sends (d + r) % 3 + 1 rows of 2 to rank d.
    send = [(d + r) % 3 + 1 for d in range(n)]
    recv = [(r + s) % 3 + 1 for s in range(n)]
    x = torch.arange(sum(send) * 2, dtype=torch.float32).reshape(-1, 2) + 100 * r
    mine = torch.zeros(sum(recv), 2)
    theirs = torch.zeros(sum(recv), 2)
    dist.all_to_all_single(mine, x, output_split_sizes=recv, input_split_sizes=send)
    dist.all_to_all_single(theirs, x, output_split_sizes=recv, input_split_sizes=send, group=GLOO)
    even_in = torch.arange(n * 3, dtype=torch.int64) + 10 * r
    even_out = torch.zeros(n * 3, dtype=torch.int64)
    dist.all_to_all_single(even_out, even_in)
    ins = [torch.full((send[d],), float(r * 10 + d)) for d in range(n)]
    outs = [torch.zeros(recv[s]) for s in range(n)]
    dist.all_to_all(outs, ins)
    assert torch.equal(mine, theirs), (mine, theirs)
    assert torch.equal(even_out, torch.cat([torch.arange(3) + 3 * r + 10 * s for s in range(n)]))
    assert all(torch.equal(o, torch.full((recv[s],), float(s * 10 + r))) for s, o in enumerate(outs))


def test_new_group_is_a_syncd_process_set():
    n, r = dist.get_world_size(), dist.get_rank()
    evens = list(range(0, n, 2))
    tail = list(range(1, n))
    g_even = dist.new_group(evens, backend="syncd")
    g_tail = dist.new_group(tail, backend="syncd")
    got = {}
    if r in evens:
        x = torch.full((3,), float(r + 1))
        dist.all_reduce(x, group=g_even)
        b = torch.full((2,), float(r))
        dist.broadcast(b, src=evens[-1], group=g_even)  # src is a global rank, as in torch
        outs = [torch.zeros(1) for _ in evens]
        dist.all_gather(outs, torch.tensor([float(r)]), group=g_even)
        dist.barrier(group=g_even)
        got["even"] = (x, b, outs)
    if r in tail:
        y = torch.ones(2)
        dist.all_reduce(y, op=dist.ReduceOp.AVG, group=g_tail)
        got["tail"] = y
    z = torch.ones(1)
    dist.all_reduce(z)  # the default group goes on beside them
    if r in evens:
        x, b, outs = got["even"]
        assert torch.equal(x, torch.full((3,), float(sum(q + 1 for q in evens))))
        assert torch.equal(b, torch.full((2,), float(evens[-1])))
        assert [o.item() for o in outs] == [float(q) for q in evens]
    if r in tail:
        assert torch.equal(got["tail"], torch.ones(2))
    assert z.item() == n


def test_zero_redundancy_optimizer_matches_plain_sgd_over_gloo():
    from torch.distributed.optim import ZeroRedundancyOptimizer
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 3))
    twin = copy.deepcopy(model)
    ddp = nn.parallel.DistributedDataParallel(model)
    ref = nn.parallel.DistributedDataParallel(twin, process_group=GLOO)
    zero = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.SGD, lr=0.1, momentum=0.9)
    sgd = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    gen = torch.Generator().manual_seed(200 + dist.get_rank())
    for _ in range(5):
        x, y = torch.randn(16, 10, generator=gen), torch.randint(0, 3, (16,), generator=gen)
        for d, o in ((ddp, zero), (ref, sgd)):
            o.zero_grad()
            nn.functional.cross_entropy(d(x), y).backward()
            o.step()
    for a, b in zip(model.parameters(), twin.parameters()):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-5), (a - b).abs().max()


def test_join_with_uneven_inputs_ends_on_every_rank():
    from torch.distributed.algorithms.join import Join
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = 3 + 2 * dist.get_rank()  # uneven: rank r has 3 + 2r batches
    seen = 0
    with Join([model]):
        for _ in range(batches):
            opt.zero_grad()
            model(torch.randn(8, 4)).sum().backward()
            opt.step()
            seen += 1
    assert seen == batches
    # Every rank's parameters agree after the join (the joined ranks shadowed the others' allreduces).
    p = torch.cat([q.detach().flatten() for q in model.parameters()])
    ps = [torch.zeros_like(p) for _ in range(dist.get_world_size())]
    dist.all_gather(ps, p)
    assert all(torch.allclose(ps[0], q) for q in ps), ps


# ---- send and recv: through the daemons, between two ranks, never coordinated with the others.
# On 2 nodes x 2 ranks a ring crosses nodes (1 -> 2, 3 -> 0) and stays on one (0 -> 1, 2 -> 3).

def ring(tensor_of, group=None):
    """Each rank isends tensor_of(r) to the next rank and irecvs from the previous one."""
    n, r = dist.get_world_size(), dist.get_rank()
    out = torch.zeros_like(tensor_of(r))
    reqs = [dist.isend(tensor_of(r), dst=(r + 1) % n, group=group),
            dist.irecv(out, src=(r - 1) % n, group=group)]
    for q in reqs:
        q.wait()
    return out


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_send_recv_ring_of_every_dtype_matches_gloo(dtype):
    n, r = dist.get_world_size(), dist.get_rank()
    mine = ring(lambda q: rank_input(q, dtype, n=11))
    theirs = ring(lambda q: rank_input(q, dtype, n=11), group=GLOO) if dtype in GLOO_DTYPES else None
    assert torch.equal(mine, rank_input((r - 1) % n, dtype, n=11))
    if theirs is not None:
        assert torch.equal(mine, theirs)


def test_send_recv_of_a_large_tensor_and_of_an_empty_one():
    n, r = dist.get_world_size(), dist.get_rank()
    big = ring(lambda q: torch.arange(3_000_000, dtype=torch.float32) + q)  # 12 MB: UCX's rendezvous
    assert torch.equal(big, torch.arange(3_000_000, dtype=torch.float32) + (r - 1) % n)
    empty = ring(lambda q: torch.zeros(0, 5))
    assert empty.shape == (0, 5)


def test_blocking_send_and_recv_in_pairs():
    n, r = dist.get_world_size(), dist.get_rank()
    peer = r ^ 1
    if peer >= n:
        pytest.skip("an odd rank out")
    x = torch.full((4,), float(r))
    if r % 2 == 0:
        dist.send(x, dst=peer)
        dist.recv(x, src=peer)
    else:
        got = torch.zeros(4)
        dist.recv(got, src=peer)
        dist.send(x, dst=peer)
        x = got
    assert torch.equal(x, torch.full((4,), float(peer)))


def test_tags_select_messages_and_one_tag_keeps_its_order():
    n, r = dist.get_world_size(), dist.get_rank()
    nxt, prv = (r + 1) % n, (r - 1) % n
    sends = [dist.isend(torch.tensor([float(100 * tag + k)]), dst=nxt, tag=tag) for tag in (1, 2) for k in range(3)]
    # Tag 2's messages first, then tag 1's: each tag's in the order sent.
    got = {}
    for tag in (2, 1):
        got[tag] = []
        for _ in range(3):
            t = torch.zeros(1)
            dist.recv(t, src=prv, tag=tag)
            got[tag].append(t.item())
    for s in sends:
        s.wait()
    assert got == {1: [100.0, 101.0, 102.0], 2: [200.0, 201.0, 202.0]}


def test_recv_from_any_source_says_who_sent():
    n, r = dist.get_world_size(), dist.get_rank()
    if r == 0:
        seen = {}
        for _ in range(n - 1):
            t = torch.zeros(2, dtype=torch.int64)
            src = dist.recv(t, tag=7)
            seen[src] = t.tolist()
        assert seen == {q: [q, q * q] for q in range(1, n)}
    else:
        dist.send(torch.tensor([r, r * r]), dst=0, tag=7)
    dist.barrier()


def test_batch_isend_irecv_exchanges_with_both_neighbours():
    n, r = dist.get_world_size(), dist.get_rank()
    left, right = (r - 1) % n, (r + 1) % n
    from_left, from_right = torch.zeros(3), torch.zeros(3)
    ops = [dist.P2POp(dist.isend, torch.full((3,), float(r)), right), dist.P2POp(dist.irecv, from_left, left),
           dist.P2POp(dist.isend, torch.full((3,), float(-r)), left), dist.P2POp(dist.irecv, from_right, right)]
    for q in dist.batch_isend_irecv(ops):
        q.wait()
    if n > 2:
        assert torch.equal(from_left, torch.full((3,), float(left)))
        assert torch.equal(from_right, torch.full((3,), float(-right)))


def test_a_receive_of_the_wrong_size_fails_naming_both_ranks_and_the_job_goes_on():
    n, r = dist.get_world_size(), dist.get_rank()
    if r == 1:
        dist.send(torch.ones(4), dst=0, tag=3)  # completes: the receive is what fails
    if r == 0:
        with pytest.raises(RuntimeError, match=r"rank 1 sent 16 bytes of float32 but the receive holds 12 bytes"):
            dist.recv(torch.zeros(3), src=1, tag=3)
    out = ring(lambda q: torch.tensor([float(q)]))
    assert out.item() == float((r - 1) % n)


def test_send_recv_within_a_new_group_uses_global_ranks():
    n, r = dist.get_world_size(), dist.get_rank()
    members = list(range(1, n))
    g = dist.new_group(members, backend="syncd")
    if r in members and len(members) > 1:
        first, last = members[0], members[-1]
        if r == last:
            dist.send(torch.tensor([float(r)]), dst=first, group=g)
        if r == first:
            t = torch.zeros(1)
            src = dist.recv(t, group=g)  # any source: the global rank comes back
            assert (src, t.item()) == (last, float(last))
    dist.barrier()


def test_tensors_already_in_the_arena_are_not_copied_and_others_once_each_way():
    from syncd.torch import basics
    pg = dist.distributed_c10d._get_default_group()
    n, r = dist.get_world_size(), dist.get_rank()
    before = pg.staging_stats()
    x = torch.ones(1000)  # ordinary memory: staged in and out
    dist.all_reduce(x)
    mid = pg.staging_stats()
    assert mid["bytes_in"] - before["bytes_in"] == 4000 and mid["bytes_out"] - before["bytes_out"] == 4000
    addr, y = basics.arena_tensor(1000, torch.float32)  # in the arena: the daemon works on it in place
    try:
        y.fill_(float(r))
        dist.all_reduce(y)
        got = ring(lambda q: torch.full((1000,), float(q)))  # staged sends and receives
        after = pg.staging_stats()
        assert after["zero_copy"] - mid["zero_copy"] == 1
        assert torch.equal(y, torch.full((1000,), float(sum(range(n)))))
        assert torch.equal(got, torch.full((1000,), float((r - 1) % n)))
        # The ring: the send's copy in, the receive's copy out (nothing copied into a receive).
        assert after["bytes_in"] - mid["bytes_in"] == 4000 and after["bytes_out"] - mid["bytes_out"] == 4000
    finally:
        del y
        basics.client().free(addr)
