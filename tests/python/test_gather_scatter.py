"""syncd.torch allgather, alltoall and reducescatter against horovod.torch 0.28's documented
behaviour, on every rank of a syncrun job (ctest runs it on 1 node x 4 ranks and 2 nodes x 2).

Expected values are rebuilt on each rank from every rank's inputs (each rank can compute what any
other rank holds), and gradients are checked against single-process autograd of the same sum of
losses (reducescatter's against Horovod's formula, which differs from it). Collectives first, assertions after, so a failure never leaves other ranks waiting."""

import pytest
import torch

import syncd.torch as hvd

DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
          torch.float32, torch.float64]


@pytest.fixture(scope="module", autouse=True)
def job():
    hvd.init()
    yield
    hvd.shutdown()


def rows_of(r):
    return r % 3  # uneven, and some ranks have none


def gather_input(r, dtype, cols=3):
    i = torch.arange(rows_of(r) * cols, dtype=torch.int64).reshape(rows_of(r), cols)
    return ((i * 3 + r * 7) % 61).to(dtype) if dtype != torch.bool else ((i + r) % 2).bool()


@pytest.mark.parametrize("dtype", DTYPES + [torch.bool])
def test_allgather_every_dtype_with_uneven_first_dimensions(dtype):
    got = hvd.allgather(gather_input(hvd.rank(), dtype), name="ag.%s" % dtype)
    h = hvd.allgather_async(gather_input(hvd.rank(), dtype), name="ag.async.%s" % dtype)
    got_async = hvd.synchronize(h)
    want = torch.cat([gather_input(r, dtype) for r in range(hvd.size())])
    assert got.dtype == dtype and torch.equal(got, want)
    assert torch.equal(got_async, want)


def test_grouped_allgather_and_unnamed_calls():
    mine = [gather_input(hvd.rank(), torch.float32), torch.full((1, 2), float(hvd.rank()))]
    grouped = hvd.grouped_allgather(mine, name="gag")
    grouped_async = hvd.synchronize(hvd.grouped_allgather_async(mine))
    unnamed = hvd.allgather(torch.tensor([hvd.rank()]))
    want0 = torch.cat([gather_input(r, torch.float32) for r in range(hvd.size())])
    want1 = torch.cat([torch.full((1, 2), float(r)) for r in range(hvd.size())])
    for g in (grouped, grouped_async):
        assert torch.equal(g[0], want0) and torch.equal(g[1], want1)
    assert unnamed.tolist() == list(range(hvd.size()))


def test_allgather_gradient_matches_single_process_autograd():
    # Each rank's loss weighs the gathered tensor by its own factor; Horovod's gradient is the
    # average over ranks, this rank's rows of it.
    n, me = hvd.size(), hvd.rank()
    weights = torch.arange(sum(r + 1 for r in range(n)) * 2, dtype=torch.float64).reshape(-1, 2)
    x = torch.ones(me + 1, 2, dtype=torch.float64, requires_grad=True)
    (hvd.allgather(x, name="ag.grad") * weights * (me + 1)).sum().backward()
    xs = [torch.ones(r + 1, 2, dtype=torch.float64, requires_grad=True) for r in range(n)]
    total = sum((torch.cat(xs) * weights * (r + 1)).sum() for r in range(n)) / n
    total.backward()
    assert torch.allclose(x.grad, xs[me].grad)


def sent_rows(s, d):
    return (2 * s + d) % 3  # not symmetric: what s sends d differs from what d sends s


def alltoall_input(s, dtype, cols=2):
    n = hvd.size()
    blocks = [torch.full((sent_rows(s, d), cols), float((s * 11 + d * 5) % 61)) for d in range(n)]
    return torch.cat(blocks).to(dtype), [sent_rows(s, d) for d in range(n)]


@pytest.mark.parametrize("dtype", DTYPES + [torch.bool])
def test_alltoall_with_splits_returns_output_and_received_splits(dtype):
    me, n = hvd.rank(), hvd.size()
    x, splits = alltoall_input(me, dtype)
    out, received = hvd.alltoall(x, splits=torch.tensor(splits, dtype=torch.int32), name="a2a.%s" % dtype)
    out_list, _ = hvd.alltoall(x, splits=splits, name="a2a.list.%s" % dtype)
    out_async, received_async = hvd.synchronize(hvd.alltoall_async(x, splits, name="a2a.async.%s" % dtype))
    want = torch.cat([torch.full((sent_rows(s, me), 2), float((s * 11 + me * 5) % 61)) for s in range(n)]).to(dtype)
    assert received.dtype == torch.int32 and received.tolist() == [sent_rows(s, me) for s in range(n)]
    assert torch.equal(out, want) and torch.equal(out_list, want) and torch.equal(out_async, want)
    assert received_async.tolist() == received.tolist()


def test_alltoall_without_splits_sends_equal_parts():
    me, n = hvd.rank(), hvd.size()
    x = torch.arange(2 * n, dtype=torch.float32) + 100 * me  # two rows to each rank
    out = hvd.alltoall(x, name="a2a.equal")
    want = torch.cat([torch.arange(2 * me, 2 * me + 2, dtype=torch.float32) + 100 * s for s in range(n)])
    assert torch.equal(out, want)


def test_alltoall_gradient_matches_single_process_autograd():
    me, n = hvd.rank(), hvd.size()
    splits = [sent_rows(me, d) for d in range(n)]
    x = torch.ones(sum(splits), 2, dtype=torch.float64, requires_grad=True)
    out, received = hvd.alltoall(x, splits=splits, name="a2a.grad")
    weight = torch.arange(out.numel(), dtype=torch.float64).reshape(out.shape) + me
    (out * weight).sum().backward()
    # Single process: rank d's output is the rows every s sent it; the loss is every rank's.
    xs = [torch.ones(sum(sent_rows(s, d) for d in range(n)), 2, dtype=torch.float64, requires_grad=True)
          for s in range(n)]
    total = 0
    for d in range(n):
        pieces = []
        for s in range(n):
            start = sum(sent_rows(s, j) for j in range(d))
            pieces.append(xs[s][start:start + sent_rows(s, d)])
        o = torch.cat(pieces)
        total = total + (o * (torch.arange(o.numel(), dtype=torch.float64).reshape(o.shape) + d)).sum()
    total.backward()
    assert torch.allclose(x.grad, xs[me].grad)
    assert not received.requires_grad


def scatter_input(r, dtype, rows, cols=3):
    i = torch.arange(rows * cols, dtype=torch.int64).reshape(rows, cols)
    return ((i % 5) + r + 1).to(dtype)


def my_rows(rows):
    n, me = hvd.size(), hvd.rank()
    start = sum(rows // n + (r < rows % n) for r in range(me))
    return start, rows // n + (me < rows % n)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["sum", "average"])
def test_reducescatter_every_dtype_with_uneven_rows(dtype, op):
    n = hvd.size()
    rows = 2 * n + 1  # does not divide: the first ranks get one row more
    hop = hvd.Sum if op == "sum" else hvd.Average
    got = hvd.reducescatter(scatter_input(hvd.rank(), dtype, rows), name="rs.%s.%s" % (dtype, op), op=hop)
    total = sum(scatter_input(r, torch.int64, rows) for r in range(n))
    if op == "average":
        total = total.double() / n if dtype.is_floating_point else torch.div(total, n, rounding_mode="trunc")
    start, count = my_rows(rows)
    want = total[start:start + count].to(dtype)
    assert got.dtype == dtype and got.shape == want.shape
    if dtype in (torch.float16, torch.bfloat16):
        assert torch.allclose(got.float(), want.float(), rtol=1e-2)
    else:
        assert torch.equal(got, want)


def test_reducescatter_default_is_average_with_scale_factors_and_grouped_forms():
    n = hvd.size()
    x = torch.full((n, 2), float(hvd.rank() + 1))
    avg = hvd.reducescatter(x, name="rs.default")
    scaled = hvd.reducescatter(x, name="rs.scaled", op=hvd.Sum, prescale_factor=0.5, postscale_factor=4.0)
    grouped = hvd.grouped_reducescatter([x, 2 * x], name="grs", op=hvd.Sum)
    grouped_async = hvd.synchronize(hvd.grouped_reducescatter_async([x], op=hvd.Sum))
    s = n * (n + 1) / 2
    assert torch.allclose(avg, torch.full((1, 2), s / n))
    assert torch.allclose(scaled, torch.full((1, 2), 2.0 * s))
    assert torch.allclose(grouped[0], torch.full((1, 2), s)) and torch.allclose(grouped[1], torch.full((1, 2), 2 * s))
    assert torch.allclose(grouped_async[0], torch.full((1, 2), s))


def output_grad(d, rows, cols, dtype, k=0):
    """Rank d's gradient of its reducescatter output (its share of `rows` rows)."""
    count = rows // hvd.size() + (d < rows % hvd.size())
    return (torch.arange(count * cols).reshape(count, cols) % 7 + d + k).to(dtype)


# Horovod's gradient of a reducescatter (horovod.torch 0.28's HorovodReducescatter.backward): the
# allgather of every rank's output gradient, times the set's size for Sum (not divided for
# Average), times the scale factors. Not the single-process derivative (1/size of it): models
# tuned under Horovod rely on Horovod's scaling.
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("op", ["sum", "average"])
@pytest.mark.parametrize("grouped", [False, True], ids=["single", "grouped"])
def test_reducescatter_gradient_is_horovods(dtype, op, grouped):
    n, me = hvd.size(), hvd.rank()
    hop = hvd.Sum if op == "sum" else hvd.Average
    shapes = [(2 * n + 1, 2), (n + 2, 3)] if grouped else [(2 * n + 1, 2)]
    xs = [torch.ones(s, dtype=dtype, requires_grad=True) for s in shapes]
    name = "rs.grad.%s.%s.%s" % (dtype, op, grouped)
    if grouped:
        ys = hvd.grouped_reducescatter(xs, name=name, op=hop, prescale_factor=2.0, postscale_factor=0.5)
    else:
        ys = [hvd.reducescatter(xs[0], name=name, op=hop, prescale_factor=2.0, postscale_factor=0.5)]
    sum((y * output_grad(me, s[0], s[1], dtype, k)).sum() for k, (y, s) in enumerate(zip(ys, shapes))).backward()
    factor = 2.0 * 0.5 * (n if op == "sum" else 1)
    for k, (x, s) in enumerate(zip(xs, shapes)):
        want = torch.cat([output_grad(d, s[0], s[1], torch.float64, k) for d in range(n)]) * factor
        assert x.grad.dtype == dtype and x.grad.shape == want.shape
        assert torch.allclose(x.grad.double(), want, rtol=1e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-6)


# ---- Errors: on every rank, never a hang; the job goes on.

def test_allgather_of_mismatched_trailing_dimensions_fails_on_every_rank():
    x = torch.ones(2, 4 if hvd.rank() == hvd.size() - 1 else 3)
    with pytest.raises(hvd.HorovodInternalError, match="shape after the first dimension"):
        hvd.allgather(x, name="ag.bad")


def test_bad_arguments_raise_value_error_and_unnamed_calls_stay_in_step():
    with pytest.raises(ValueError, match="at least one dimension"):
        hvd.allgather(torch.tensor(1.0))
    with pytest.raises(ValueError, match="add up to"):
        hvd.alltoall(torch.ones(5), splits=[1] * hvd.size())
    if 5 % hvd.size():
        with pytest.raises(ValueError, match="do not divide"):
            hvd.alltoall(torch.ones(5))
    with pytest.raises(ValueError, match="Sum and Average"):
        hvd.reducescatter(torch.ones(4), op=hvd.Max)
    with pytest.raises(ValueError, match="not supported"):
        hvd.allgather(torch.ones(2, dtype=torch.complex64))
    # Every rank refused the same calls: the unnamed counters agree and the next one matches.
    y = hvd.allgather(torch.tensor([hvd.rank()]))
    assert y.tolist() == list(range(hvd.size()))


# Horovod's users catch its refusals with `except RuntimeError` (HorovodInternalError and
# NotImplementedError are RuntimeErrors); syncd's were ValueErrors. They are both now.
@pytest.mark.parametrize("call", [
    lambda: hvd.reducescatter(torch.ones(4), op=hvd.Adasum),
    lambda: hvd.reducescatter_async(torch.ones(4), op=hvd.Adasum),
    lambda: hvd.grouped_reducescatter([torch.ones(4)], op=hvd.Adasum),
    lambda: hvd.reducescatter(torch.ones(4), op=hvd.Max),
], ids=["reducescatter", "reducescatter_async", "grouped_reducescatter", "reducescatter_max"])
def test_refusals_are_caught_as_horovods_runtime_errors_and_as_value_errors(call):
    for kind in (RuntimeError, NotImplementedError, ValueError):
        with pytest.raises(kind, match="Adasum|Sum and Average"):
            call()
    # Nothing was submitted: the next unnamed call matches on every rank.
    assert hvd.allgather(torch.tensor([hvd.rank()])).tolist() == list(range(hvd.size()))


def test_allgather_object_is_one_native_allgather():
    objs = hvd.allgather_object({"rank": hvd.rank(), "pad": "x" * (hvd.rank() * 1000)})
    assert [o["rank"] for o in objs] == list(range(hvd.size()))
    assert [len(o["pad"]) for o in objs] == [r * 1000 for r in range(hvd.size())]


# ---- SyncBatchNorm: BatchNorm over every rank's samples together.

def test_sync_batch_norm_equals_batch_norm_over_the_concatenated_batch():
    n, me = hvd.size(), hvd.rank()
    torch.manual_seed(0)
    batches = [torch.randn(r + 2, 3, 4, dtype=torch.float64) for r in range(n)]  # uneven batches
    sync = hvd.SyncBatchNorm(3).double()
    ref = torch.nn.BatchNorm1d(3).double()
    with torch.no_grad():
        for m in (sync, ref):
            m.weight.copy_(torch.tensor([1.0, 2.0, 0.5]))
            m.bias.copy_(torch.tensor([0.0, 1.0, -1.0]))
    x = batches[me].clone().requires_grad_(True)
    y = sync(x)
    weights = torch.arange(y.numel(), dtype=torch.float64).reshape(y.shape)
    (y * weights * (me + 1)).sum().backward()
    weight_grad = hvd.allreduce(sync.weight.grad, op=hvd.Sum, name="sbn.wgrad")
    # Single process: the concatenated batch and the sum of every rank's loss.
    xs = [b.clone().requires_grad_(True) for b in batches]
    out = ref(torch.cat(xs))
    total, at = 0, 0
    for r, b in enumerate(batches):
        part = out[at:at + b.shape[0]]
        total = total + (part * torch.arange(part.numel(), dtype=torch.float64).reshape(part.shape) * (r + 1)).sum()
        at += b.shape[0]
    total.backward()
    start = sum(b.shape[0] for b in batches[:me])
    assert torch.allclose(y, out[start:start + x.shape[0]].detach())
    assert torch.allclose(x.grad, xs[me].grad)
    assert torch.allclose(weight_grad, ref.weight.grad)
    assert torch.allclose(sync.running_mean, ref.running_mean) and torch.allclose(sync.running_var, ref.running_var)
    sync.eval()
    ref.eval()
    assert torch.allclose(sync(batches[me]), ref(batches[me]))


# ---- Sparse gradients: nn.Embedding(sparse=True) with torch.optim.SparseAdam.

# sparse_as_dense=True (Horovod): reduced densely, handed to the optimizer sparse again, so
# SparseAdam takes it (before: "SparseAdam does not support dense gradients").
@pytest.mark.parametrize("sparse_as_dense", [False, True])
@pytest.mark.parametrize("optimizer", ["SparseAdam", "SGD"])
def test_sparse_gradients_are_averaged_and_reach_the_optimizer_sparse(sparse_as_dense, optimizer):
    n, me = hvd.size(), hvd.rank()
    make = {"SparseAdam": lambda ps: torch.optim.SparseAdam(ps, lr=0.1), "SGD": lambda ps: torch.optim.SGD(ps, lr=0.5)}
    torch.manual_seed(0)
    emb = torch.nn.Embedding(10, 3, sparse=True)
    ref = torch.nn.Embedding(10, 3, sparse=True)
    ref.load_state_dict(emb.state_dict())
    opt = hvd.DistributedOptimizer(make[optimizer](emb.parameters()), named_parameters=emb.named_parameters(),
                                   sparse_as_dense=sparse_as_dense)
    ref_opt = make[optimizer](ref.parameters())
    lookups = [torch.tensor([r, r + 1, 9]) for r in range(n)]
    grads = []
    for step in range(2):
        opt.zero_grad()
        (emb(lookups[me]) * (step + 1)).sum().backward()
        opt.synchronize()
        grads.append(emb.weight.grad)
        with opt.skip_synchronize():
            opt.step()
        # The same step on one process: the average of every rank's gradient, sparse by rows.
        want = torch.zeros(10, 3)
        for r in range(n):
            for i in lookups[r].tolist():
                want[i] += float(step + 1) / n
        ref.weight.grad = want.to_sparse(1)
        ref_opt.step()
    weights = hvd.allgather(emb.weight.detach().unsqueeze(0), name="emb.weights.%s.%d" % (optimizer, sparse_as_dense))
    assert all(g.is_sparse for g in grads)
    assert torch.allclose(grads[-1].to_dense(), want)
    assert torch.allclose(emb.weight, ref.weight, atol=1e-6)
    assert all(torch.equal(weights[0], weights[r]) for r in range(n)), "ranks diverged"
