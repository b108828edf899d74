"""syncd.torch allgather, alltoall and reducescatter against horovod.torch 0.28's documented
behaviour, on every rank of a syncrun job (ctest runs it on 1 node x 4 ranks and 2 nodes x 2).

Expected values are rebuilt on each rank from every rank's inputs (each rank can compute what any
other rank holds), and gradients are checked against single-process autograd of the same sum of
losses. Collectives first, assertions after, so a failure never leaves other ranks waiting."""

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


@pytest.mark.parametrize("op", ["sum", "average"])
def test_reducescatter_gradient_matches_single_process_autograd(op):
    n, me = hvd.size(), hvd.rank()
    rows = 2 * n + 1
    hop = hvd.Sum if op == "sum" else hvd.Average
    x = torch.ones(rows, 2, dtype=torch.float64, requires_grad=True)
    y = hvd.reducescatter(x, name="rs.grad.%s" % op, op=hop, prescale_factor=2.0)
    (y * (torch.arange(y.numel(), dtype=torch.float64).reshape(y.shape) + me)).sum().backward()
    xs = [torch.ones(rows, 2, dtype=torch.float64, requires_grad=True) for _ in range(n)]
    reduced = sum(2.0 * t for t in xs)
    if op == "average":
        reduced = reduced / n
    total, start = 0, 0
    for d in range(n):
        count = rows // n + (d < rows % n)
        part = reduced[start:start + count]
        total = total + (part * (torch.arange(part.numel(), dtype=torch.float64).reshape(part.shape) + d)).sum()
        start += count
    total.backward()
    assert torch.allclose(x.grad, xs[me].grad)


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
    with pytest.raises(ValueError, match="Adasum"):
        hvd.reducescatter(torch.ones(4), op=hvd.Adasum)
    with pytest.raises(ValueError, match="not supported"):
        hvd.allgather(torch.ones(2, dtype=torch.complex64))
    # Every rank refused the same calls: the unnamed counters agree and the next one matches.
    y = hvd.allgather(torch.tensor([hvd.rank()]))
    assert y.tolist() == list(range(hvd.size()))


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

@pytest.mark.parametrize("sparse_as_dense", [False, True])
def test_sparse_gradients_are_gathered_and_stay_sparse(sparse_as_dense):
    n, me = hvd.size(), hvd.rank()
    torch.manual_seed(0)
    emb = torch.nn.Embedding(10, 3, sparse=True)
    inner = torch.optim.SGD(emb.parameters(), lr=0.5) if sparse_as_dense else torch.optim.SparseAdam(emb.parameters())
    opt = hvd.DistributedOptimizer(inner, named_parameters=emb.named_parameters(), sparse_as_dense=sparse_as_dense)
    lookups = [torch.tensor([r, r + 1, 9]) for r in range(n)]
    for step in range(2):
        opt.zero_grad()
        emb(lookups[me]).sum().backward()
        opt.synchronize()
        grad = emb.weight.grad
        with opt.skip_synchronize():
            opt.step()
    weights = hvd.allgather(emb.weight.detach().unsqueeze(0), name="emb.weights.%d" % sparse_as_dense)
    assert grad.is_sparse != sparse_as_dense
    # The average of every rank's dense gradient.
    want = torch.zeros(10, 3)
    for r in range(n):
        for i in lookups[r].tolist():
            want[i] += 1.0 / n
    assert torch.allclose(grad.to_dense(), want)
    assert all(torch.equal(weights[0], weights[r]) for r in range(n)), "ranks diverged"
