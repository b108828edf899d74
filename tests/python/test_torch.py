"""syncd.torch against Horovod's documented behaviour, on every rank of a syncrun job.

Every test makes its collectives first and asserts after, so a failing assertion on one rank
never leaves the others waiting for a collective it skipped."""

import pytest
import torch

import syncd.torch as hvd
from training_check import distributed_matches_single_process, make_model, shard

DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
          torch.float32, torch.float64]
FLOATS = {torch.float16, torch.bfloat16, torch.float32, torch.float64}
OPS = {"sum": hvd.Sum, "average": hvd.Average, "min": hvd.Min, "max": hvd.Max, "product": hvd.Product}


@pytest.fixture(scope="module", autouse=True)
def job():
    hvd.init()
    yield
    hvd.shutdown()


def rank_data(r, dtype, shape, op):
    """Rank r's tensor: small integers so every dtype holds every result exactly."""
    n = 1
    for d in shape:
        n *= d
    i = torch.arange(n, dtype=torch.int64).reshape(shape)
    values = (i % 2) + 1 if op == "product" else (i % 5) + r + 1
    if op in ("min", "max"):
        values = (i * 7 + r * 3) % 11
    return values.to(dtype)


def expected(dtype, shape, op):
    ranks = [rank_data(r, torch.int64, shape, op) for r in range(hvd.size())]
    stacked = torch.stack(ranks)
    if op == "sum":
        out = stacked.sum(0)
    elif op == "average":
        total = stacked.sum(0)
        out = total.double() / hvd.size() if dtype in FLOATS else torch.div(total, hvd.size(), rounding_mode="trunc")
    elif op == "min":
        out = stacked.min(0).values
    elif op == "max":
        out = stacked.max(0).values
    else:
        out = stacked.prod(0)
    return out.to(dtype)


def check_equal(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype in (torch.float16, torch.bfloat16):
        assert torch.allclose(got.float(), want.float(), rtol=1e-2), (got, want)
    else:
        assert torch.equal(got, want), (got, want)


def test_identity_is_consistent():
    ids = hvd.allgather_object((hvd.rank(), hvd.local_rank(), hvd.local_size(), hvd.cross_rank(), hvd.cross_size()))
    assert hvd.is_initialized()
    assert [i[0] for i in ids] == list(range(hvd.size()))
    assert sum(1 for i in ids if i[3] == hvd.cross_rank()) == hvd.local_size()
    assert {i[4] for i in ids} == {hvd.cross_size()}
    assert hvd.size() == hvd.local_size() * hvd.cross_size()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", list(OPS))
def test_allreduce_every_dtype_and_op(dtype, op):
    results = []
    for dims, shape in enumerate([(17,), (3, 5), (2, 3, 4)]):
        x = rank_data(hvd.rank(), dtype, shape, op)
        before = x.clone()
        y = hvd.allreduce(x, name="ar.%s.%s.%d" % (dtype, op, dims), op=OPS[op])
        results.append((x, before, y, shape))
    for x, before, y, shape in results:
        assert torch.equal(x, before), "allreduce modified its input"
        check_equal(y, expected(dtype, shape, op))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_allreduce_in_place_and_async_forms(dtype):
    shape = (4, 6)
    a = rank_data(hvd.rank(), dtype, shape, "sum")
    b = rank_data(hvd.rank(), dtype, shape, "sum")
    c = rank_data(hvd.rank(), dtype, shape, "sum")
    ret = hvd.allreduce_(a, name="inplace.%s" % dtype, op=hvd.Sum)
    hb = hvd.allreduce_async(b, name="async.%s" % dtype, op=hvd.Sum)
    hc = hvd.allreduce_async_(c, name="async_.%s" % dtype, op=hvd.Sum)
    out_b = hvd.synchronize(hb)
    while not hvd.poll(hc):
        pass
    out_c = hvd.synchronize(hc)
    want = expected(dtype, shape, "sum")
    assert ret is a
    check_equal(a, want)
    check_equal(out_b, want)
    check_equal(b, rank_data(hvd.rank(), dtype, shape, "sum"))
    assert out_c is c
    check_equal(c, want)


def test_default_op_is_average_and_unnamed_calls_match_by_order():
    x = torch.full((5,), float(hvd.rank()))
    y = hvd.allreduce(x)
    z = hvd.allreduce(x * 2)
    mean = sum(range(hvd.size())) / hvd.size()
    assert torch.allclose(y, torch.full((5,), mean))
    assert torch.allclose(z, torch.full((5,), 2 * mean))


def test_average_keyword_is_deprecated_but_works():
    x = torch.ones(3) * (hvd.rank() + 1)
    with pytest.warns(DeprecationWarning):
        summed = hvd.allreduce(x, average=False, name="avg_kw")
    assert torch.equal(summed, torch.ones(3) * sum(range(1, hvd.size() + 1)))
    with pytest.raises(ValueError):
        hvd.allreduce(x, average=True, op=hvd.Sum)


def test_prescale_and_postscale():
    x = torch.ones(8, dtype=torch.float64) * (hvd.rank() + 1)
    y = hvd.allreduce(x, name="scaled", op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5)
    z = hvd.allreduce(x, name="scaled_avg", op=hvd.Average, prescale_factor=3.0)
    total = sum(range(1, hvd.size() + 1))
    assert torch.allclose(y, torch.full((8,), float(total), dtype=torch.float64))
    assert torch.allclose(z, torch.full((8,), 3.0 * total / hvd.size(), dtype=torch.float64))


def test_non_contiguous_and_zero_sized_tensors():
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4) * (hvd.rank() + 1)
    t = base.t()  # a non-contiguous view
    y = hvd.allreduce(t, name="noncontig", op=hvd.Sum)
    hvd.allreduce_(t, name="noncontig_", op=hvd.Sum)
    empty = hvd.allreduce(torch.zeros(0, 3), name="empty", op=hvd.Sum)
    total = sum(range(1, hvd.size() + 1))
    want = torch.arange(12, dtype=torch.float32).reshape(3, 4).t() * total
    assert torch.equal(y, want)
    assert torch.equal(t, want) and torch.equal(base.t(), want)
    assert empty.shape == (0, 3)


def test_allreduce_gradient_is_an_allreduce():
    x = torch.ones(4, requires_grad=True)
    y = hvd.allreduce(x * (hvd.rank() + 1), name="grad_sum", op=hvd.Sum)
    (y * (hvd.rank() + 1)).sum().backward()
    # d/dx of sum_r (r+1) x reduced; the incoming gradients (r+1) are summed too.
    total = sum(range(1, hvd.size() + 1))
    assert torch.allclose(x.grad, torch.full((4,), float((hvd.rank() + 1) * total)))
    a = torch.ones(3, requires_grad=True)
    hvd.allreduce(a, name="grad_avg").sum().backward()
    assert torch.allclose(a.grad, torch.ones(3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64], ids=str)
def test_grouped_allreduce(dtype):
    shapes = [(3,), (2, 2), (5,)]
    ts = [rank_data(hvd.rank(), dtype, s, "sum") for s in shapes]
    outs = hvd.grouped_allreduce(ts, name="grouped.%s" % dtype, op=hvd.Sum)
    copies = [t.clone() for t in ts]
    same = hvd.grouped_allreduce_(copies, name="grouped_.%s" % dtype, op=hvd.Sum)
    h = hvd.grouped_allreduce_async([t.clone() for t in ts], name="grouped_async.%s" % dtype, op=hvd.Sum)
    outs_async = hvd.synchronize(h)
    for s, out, inplace, a in zip(shapes, outs, copies, outs_async):
        want = expected(dtype, s, "sum")
        check_equal(out, want)
        check_equal(inplace, want)
        check_equal(a, want)
    assert all(x is y for x, y in zip(same, copies))


def test_grouped_allreduce_gradient():
    xs = [torch.ones(2, requires_grad=True), torch.ones(3, requires_grad=True)]
    ys = hvd.grouped_allreduce(xs, name="grouped_grad", op=hvd.Sum)
    sum(y.sum() for y in ys).backward()
    assert all(torch.allclose(x.grad, torch.full(x.shape, float(hvd.size()))) for x in xs)


@pytest.mark.parametrize("dtype", DTYPES + [torch.bool], ids=str)
def test_broadcast_every_dtype_and_root(dtype):
    results = []
    for root in range(hvd.size()):
        x = rank_data(hvd.rank(), dtype, (3, 7), "sum")
        before = x.clone()
        y = hvd.broadcast(x, root_rank=root, name="bc.%s.%d" % (dtype, root))
        z = rank_data(hvd.rank(), dtype, (9,), "sum")
        hvd.broadcast_(z, root_rank=root, name="bc_.%s.%d" % (dtype, root))
        h = hvd.broadcast_async(x, root, name="bca.%s.%d" % (dtype, root))
        w = rank_data(hvd.rank(), dtype, (2,), "sum")
        h_ = hvd.broadcast_async_(w, root, name="bca_.%s.%d" % (dtype, root))
        results.append((root, x, before, y, z, hvd.synchronize(h), hvd.synchronize(h_), w))
    for root, x, before, y, z, a, a_, w in results:
        assert torch.equal(x, before)
        assert torch.equal(y, rank_data(root, dtype, (3, 7), "sum"))
        assert torch.equal(z, rank_data(root, dtype, (9,), "sum"))
        assert torch.equal(a, rank_data(root, dtype, (3, 7), "sum"))
        assert a_ is w and torch.equal(w, rank_data(root, dtype, (2,), "sum"))


def test_broadcast_gradient_goes_to_the_root():
    # horovod.torch 0.28: the root's input gets the average of every rank's output gradient
    # (here rank r's output gradient is r + 1), every other rank's input zero.
    x = torch.ones(3, requires_grad=True)
    y = hvd.broadcast(x * 2, root_rank=1, name="bc_grad")
    (y * (hvd.rank() + 1)).sum().backward()
    mean = sum(r + 1 for r in range(hvd.size())) / hvd.size()
    want = 2.0 * mean if hvd.rank() == 1 else 0.0
    # A leaf tensor broadcast directly, and an unnamed broadcast: no hang, the same rule.
    leaf = torch.full((2,), 3.0, requires_grad=True)
    hvd.broadcast(leaf, root_rank=0).sum().backward()
    assert torch.allclose(x.grad, torch.full((3,), want))
    assert torch.allclose(leaf.grad, torch.full((2,), 1.0 if hvd.rank() == 0 else 0.0))


def test_barrier_and_objects():
    hvd.barrier()
    obj = hvd.broadcast_object({"from": hvd.rank(), "list": [1, 2, 3]}, root_rank=1)
    everyone = hvd.allgather_object("rank-%d" % hvd.rank() * (hvd.rank() + 1))
    gathered = hvd.allgather(torch.arange(hvd.rank() + 1, dtype=torch.float32), name="ag")
    hvd.barrier()
    assert obj == {"from": 1, "list": [1, 2, 3]}
    assert everyone == ["rank-%d" % r * (r + 1) for r in range(hvd.size())]
    assert torch.equal(gathered, torch.cat([torch.arange(r + 1, dtype=torch.float32) for r in range(hvd.size())]))


# ---- Errors: raised on every rank, never a hang.

def test_duplicate_in_flight_name_raises_value_error():
    x = torch.ones(4)
    h = hvd.allreduce_async(x, name="dup")
    with pytest.raises(ValueError, match="dup"):
        hvd.allreduce_async(x, name="dup")
    hvd.synchronize(h)


def test_mismatched_shapes_raise_on_every_rank():
    x = torch.ones(3 if hvd.rank() == 0 else 4)
    with pytest.raises(hvd.HorovodInternalError, match="shape_mismatch") as e:
        hvd.allreduce(x, name="shape_mismatch")
    assert isinstance(e.value, RuntimeError)


def test_mismatched_dtypes_raise_on_every_rank():
    x = torch.ones(4, dtype=torch.float32 if hvd.rank() % 2 else torch.float64)
    with pytest.raises(hvd.HorovodInternalError, match="dtype_mismatch"):
        hvd.allreduce(x, name="dtype_mismatch")


def test_mismatched_ops_raise_on_every_rank():
    with pytest.raises(hvd.HorovodInternalError, match="op_mismatch"):
        hvd.allreduce(torch.ones(2), name="op_mismatch", op=hvd.Sum if hvd.rank() else hvd.Max)


def test_mismatched_broadcast_roots_raise_on_every_rank():
    with pytest.raises(hvd.HorovodInternalError, match="root_mismatch"):
        hvd.broadcast(torch.ones(2), root_rank=hvd.rank() % 2, name="root_mismatch")


def test_the_job_goes_on_after_errors():
    y = hvd.allreduce(torch.ones(2), name="after_errors", op=hvd.Sum)
    assert torch.equal(y, torch.full((2,), float(hvd.size())))


def test_bool_allreduce_is_logical_or_and():
    # As torch.distributed: Sum and Max are logical or, Min and Product logical and.
    x = torch.tensor([False, True, hvd.rank() == 0, True])
    ors = [hvd.allreduce(x, name="bool.%s" % op, op=OPS[op]) for op in ("sum", "max")]
    ands = [hvd.allreduce(x, name="bool.%s" % op, op=OPS[op]) for op in ("min", "product")]
    for y in ors:
        assert y.dtype == torch.bool and y.tolist() == [False, True, True, True]
    for y in ands:
        assert y.tolist() == [False, True, hvd.size() == 1, True]


def adasum_reference(vectors):
    """Adasum's rule in float64 up the binary tree of ranks (a zero vector's coefficient 1)."""
    v = [x.double().flatten() for x in vectors]
    level = 1
    while level < len(v):
        for r in range(0, len(v), 2 * level):
            a, b = v[r], v[r + level]
            dot, aa, bb = float(a @ b), float(a @ a), float(b @ b)
            v[r] = (1 - dot / aa / 2 if aa > 0 else 1.0) * a + (1 - dot / bb / 2 if bb > 0 else 1.0) * b
        level *= 2
    return v[0]


def test_adasum_allreduce_and_grouped_allreduce_match_the_rule_in_float64():
    def data(r, n, seed):
        return torch.sin(torch.arange(n, dtype=torch.float64) * 0.37 + 1.3 * r + seed) * (1 + seed)

    got = {dt: hvd.allreduce(data(hvd.rank(), 40, 0).to(dt), op=hvd.Adasum, name="adasum.%s" % dt)
           for dt in (torch.float16, torch.bfloat16, torch.float32, torch.float64)}
    grouped = hvd.grouped_allreduce([data(hvd.rank(), 30, s).float() for s in range(3)], op=hvd.Adasum,
                                    name="adasum.grouped")
    scaled = hvd.allreduce(data(hvd.rank(), 20, 1).float(), op=hvd.Adasum, prescale_factor=0.5, postscale_factor=4.0,
                           name="adasum.scaled")
    cast = hvd.allreduce(data(hvd.rank(), 20, 2).float(), op=hvd.Adasum, compression=hvd.Compression.fp16,
                         name="adasum.fp16")
    with pytest.raises(ValueError, match="cannot go with Adasum"):
        hvd.allreduce(torch.ones(4), op=hvd.Adasum, compression=hvd.Compression.topk(0.5), name="adasum.topk")
    with pytest.raises(ValueError, match="float tensors"):
        hvd.allreduce(torch.ones(4, dtype=torch.int32), op=hvd.Adasum, name="adasum.ints")
    n = hvd.size()
    for dt, tol in ((torch.float16, 4e-3), (torch.bfloat16, 3e-2), (torch.float32, 2e-6), (torch.float64, 1e-12)):
        want = adasum_reference([data(r, 40, 0).to(dt) for r in range(n)])
        assert (got[dt].double() - want).abs().max() <= tol * want.abs().max(), (dt, got[dt], want)
    for s, t in enumerate(grouped):  # each member its own dot products
        want = adasum_reference([data(r, 30, s).float() for r in range(n)])
        assert torch.allclose(t.double(), want, atol=1e-5), (s, t, want)
    want = adasum_reference([data(r, 20, 1).float() * 0.5 for r in range(n)]) * 4.0
    assert torch.allclose(scaled.double(), want, atol=1e-5)
    want = adasum_reference([data(r, 20, 2).float().half() for r in range(n)])
    assert torch.allclose(cast.double(), want, atol=3e-2)


# Horovod's own Adasum cases (its test_adasum_pytorch.py: orthogonal, parallel, stability,
# stability_2), with its closeness criterion: |computed - expected| / |expected| / 100 below the
# dtype's epsilon. Orthonormal vectors add; parallel ones average, whatever their scale: of the
# dtype's smallest normal magnitude, or spread from it to the square root of its largest.
def _horovod_adasum_case(case, dtype, n):
    import numpy as np  # noqa: E402 (only these tests need it)
    rng = np.random.RandomState(2)
    size, np_dtype = hvd.size(), {torch.float16: np.float16, torch.float32: np.float32}[dtype]
    if case == "orthogonal":
        q = np.linalg.qr(rng.normal(0, 1, (n, size)))[0]
    else:
        if case == "parallel":
            a, r = rng.normal(0, 1, (n, 1)), rng.normal(0, 1, (size, 1))
        elif case == "stability":
            a, r = rng.normal(0, np.finfo(np_dtype).tiny, (n, 1)), rng.normal(0, 1, (size, 1))
        else:
            lo, hi = float(np.finfo(np_dtype).tiny), float(np.finfo(np_dtype).max) ** 0.5
            a = rng.normal(0, 1, (n, 1))
            r = np.array([[hi ** ((i + 1) / size) * lo ** ((size - i - 1) / size)] for i in range(size)])
            rng.shuffle(r)
        q = a @ r.T
    q = q.astype(np_dtype).astype(np.float64)
    expected = q.sum(axis=1) / (1 if case == "orthogonal" else size)
    return torch.from_numpy(q[:, hvd.rank()].astype(np_dtype)), expected, float(np.finfo(np_dtype).eps)


@pytest.mark.parametrize("case", ["orthogonal", "parallel", "stability", "stability_2"])
def test_adasum_passes_horovods_own_cases(case):
    results = []
    for dtype in (torch.float32, torch.float16):
        for n in ([hvd.size() * 20 - 17, hvd.size() * 2 + 1, hvd.size() + 2] if case in ("orthogonal", "parallel")
                  else [1024]):
            tensor, expected, eps = _horovod_adasum_case(case, dtype, n)
            hvd.allreduce_(tensor, op=hvd.Adasum, name="horovod.%s.%s.%d" % (case, dtype, n))
            got = tensor.double().numpy()
            off = float(((got - expected) ** 2).sum() ** 0.5 / (expected ** 2).sum() ** 0.5 / 100)
            results.append((dtype, n, off, eps))
    assert all(off < eps for _, _, off, eps in results), results


def test_bad_arguments_raise_value_error():
    with pytest.raises(ValueError, match="cannot average"):
        hvd.allreduce(torch.ones(2, dtype=torch.bool), name="bool")  # Average, the default
    with pytest.raises(ValueError):
        hvd.allreduce(torch.ones(2, dtype=torch.complex64), name="complex")
    with pytest.raises(ValueError):
        hvd.broadcast(torch.ones(2), root_rank=hvd.size(), name="bad_root")
    with pytest.raises(ValueError):
        hvd.poll(123456789)
    assert hvd.synchronize(123456789) is None
    with pytest.raises(ValueError):
        hvd.broadcast_parameters(object(), root_rank=0)


def test_grouped_allreduce_with_an_unsupported_tensor_raises_and_leaves_nothing_in_flight():
    with pytest.raises(ValueError, match="bad_group.1"):
        hvd.grouped_allreduce_async([torch.ones(2), torch.ones(2, dtype=torch.complex64)], name="bad_group")
    # The first tensor was submitted and waited for: its name is free again.
    y = hvd.allreduce(torch.ones(2), name="bad_group_after", op=hvd.Sum)
    assert torch.equal(y, torch.full((2,), float(hvd.size())))


def test_a_tensor_only_some_ranks_refuse_fails_every_rank_naming_them():
    # Rank 0's tensor has a type syncd does not take; the others' is fine. Rank 0 raises at once;
    # the others get an error naming rank 0 instead of waiting for it.
    bad = hvd.rank() == 0
    x = torch.ones(3, dtype=torch.complex64 if bad else torch.float32)
    if bad:
        with pytest.raises(ValueError, match="not supported"):
            hvd.allreduce(x)
    else:
        with pytest.raises(hvd.HorovodInternalError, match="rank 0 could not take part"):
            hvd.allreduce(x)


@pytest.mark.parametrize("failure", ["unsupported_dtype_everywhere", "shape_mismatch", "dtype_on_one_rank",
                                     "grouped_part_on_one_rank"])
def test_unnamed_collectives_stay_in_step_after_a_failure(failure):
    # Issue 17: automatically named collectives must still match across ranks after one failed.
    r = hvd.rank()
    with pytest.raises((ValueError, hvd.HorovodInternalError)):
        if failure == "unsupported_dtype_everywhere":
            hvd.allreduce(torch.ones(2, dtype=torch.complex64))
        elif failure == "shape_mismatch":
            hvd.allreduce(torch.ones(2 + r))
        elif failure == "dtype_on_one_rank":
            hvd.allreduce(torch.ones(2, dtype=torch.complex64 if r == hvd.size() - 1 else torch.float32))
        else:
            parts = [torch.ones(2), torch.ones(2, dtype=torch.complex64 if r == 1 else torch.float32), torch.ones(2)]
            hvd.grouped_allreduce(parts)
    for step in range(100):
        y = hvd.allreduce(torch.full((3,), float(r + step)), op=hvd.Sum)
        assert torch.equal(y, torch.full((3,), float(sum(range(hvd.size())) + step * hvd.size())))


def test_shutdown_then_init_again():
    hvd.shutdown()
    assert not hvd.is_initialized()
    with pytest.raises(ValueError):
        hvd.rank()
    hvd.init()
    y = hvd.allreduce(torch.ones(3), name="after_reinit", op=hvd.Sum)
    assert hvd.is_initialized()
    assert torch.equal(y, torch.full((3,), float(hvd.size())))


# ---- Models and optimizers.

def test_distributed_optimizer_matches_single_process_training():
    assert distributed_matches_single_process(hvd) == []


def test_gradients_live_in_the_arena_and_stay_put():
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    ptrs = []
    for step in range(3):
        opt.zero_grad()
        model(shard(step, hvd.rank())[0]).sum().backward()
        opt.step()
        ptrs.append([p.grad.data_ptr() for p in model.parameters()])
    c = hvd.basics.client()
    assert all(c.in_arena(p.grad.data_ptr(), p.grad.numel() * 4) for p in model.parameters())
    assert ptrs[0] == ptrs[1] == ptrs[2]


def test_distributed_optimizer_accumulates_backward_passes_and_zero_grad_set_to_none():
    model = make_model()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters(),
                                   backward_passes_per_step=2, op=hvd.Sum)
    for step in range(2):
        opt.zero_grad(set_to_none=(step == 1))
        weights = {k: v.clone() for k, v in model.state_dict().items()}
        for micro in range(2):
            model(shard(10 * step + micro, hvd.rank())[0]).sum().backward()
        opt.synchronize()
        grads = [p.grad.clone() for p in model.parameters()]
        with opt.skip_synchronize():
            opt.step()
    ref = make_model()
    ref.load_state_dict(weights)  # as they were for the last step's backward passes
    for r in range(hvd.size()):
        for micro in range(2):
            ref(shard(10 + micro, r)[0]).sum().backward()
    for g, p in zip(grads, ref.parameters()):
        assert torch.allclose(g, p.grad, atol=1e-5)


def test_distributed_optimizer_without_names_over_several_parameter_groups():
    # Horovod names them allreduce.noname.<group>.<index>: no duplicates across groups.
    model = make_model()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    layers = list(model.children())
    sgd = torch.optim.SGD([{"params": layers[0].parameters()}, {"params": layers[2].parameters(), "lr": 0.05}],
                          lr=0.1)
    opt = hvd.DistributedOptimizer(sgd)
    opt.zero_grad()
    model(shard(7, hvd.rank())[0]).sum().backward()
    opt.synchronize()
    grads = [p.grad.clone() for p in model.parameters()]
    with opt.skip_synchronize():
        opt.step()
    ref = make_model()
    for r in range(hvd.size()):
        ref(shard(7, r)[0]).sum().backward()
    for g, p in zip(grads, ref.parameters()):
        assert torch.allclose(g, p.grad / hvd.size(), atol=1e-5)


def test_distributed_optimizer_argument_errors():
    model = make_model()
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    named = list(model.named_parameters())
    with pytest.raises(ValueError, match="unique"):
        hvd.DistributedOptimizer(sgd, named_parameters=[(named[0][0], p) for _, p in named])
    with pytest.raises(ValueError, match="not named"):
        hvd.DistributedOptimizer(sgd, named_parameters=named[:1])
    with pytest.raises(ValueError, match="tuples"):
        hvd.DistributedOptimizer(sgd, named_parameters=[p for _, p in named])


OPTIMIZERS = {
    "SGD": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
    "Adam": lambda ps: torch.optim.Adam(ps, lr=0.01, amsgrad=True),
    "AdamW": lambda ps: torch.optim.AdamW(ps, lr=0.01),
    "Adagrad": lambda ps: torch.optim.Adagrad(ps, lr=0.01),
    "Adadelta": lambda ps: torch.optim.Adadelta(ps),
    "Adamax": lambda ps: torch.optim.Adamax(ps, lr=0.01),
    "ASGD": lambda ps: torch.optim.ASGD(ps, lr=0.01),
    "NAdam": lambda ps: torch.optim.NAdam(ps, lr=0.01),
    "RAdam": lambda ps: torch.optim.RAdam(ps, lr=0.01),
    "RMSprop": lambda ps: torch.optim.RMSprop(ps, lr=0.01, momentum=0.5),
    "Rprop": lambda ps: torch.optim.Rprop(ps, lr=0.01),
}


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_broadcast_parameters_and_optimizer_state_make_ranks_identical(name):
    model = make_model(seed=100 + hvd.rank())
    opt = OPTIMIZERS[name](model.parameters())
    for group in opt.param_groups:
        group["lr"] *= hvd.rank() + 1  # hyperparameters differ too until broadcast
    for step in range(hvd.rank() + 1):  # ranks even differ in how many steps built their state
        opt.zero_grad()
        model(shard(step, hvd.rank())[0]).sum().backward()
        opt.step()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    mine = {"params": model.state_dict(), "opt": opt.state_dict()}
    root = hvd.broadcast_object(mine, root_rank=0, name="check.%s" % name)

    def same(a, b):
        if torch.is_tensor(a):
            return torch.is_tensor(b) and torch.equal(a, b)
        if isinstance(a, dict):
            return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        if isinstance(a, (list, tuple)):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        return a == b
    assert same(mine, root)


def test_broadcast_parameters_accepts_named_parameters_and_parameters():
    model = make_model(seed=hvd.rank())
    hvd.broadcast_parameters(list(model.named_parameters()), root_rank=2 % hvd.size())
    other = make_model(seed=50 + hvd.rank())
    hvd.broadcast_parameters(list(other.parameters()), root_rank=0)
    want, want_other = make_model(seed=2 % hvd.size()), make_model(seed=50)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), want.parameters()))
    assert all(torch.equal(p, q) for p, q in zip(other.parameters(), want_other.parameters()))


def test_fp16_compression():
    x = torch.full((6,), 0.5 * (hvd.rank() + 1), dtype=torch.float32)
    y = hvd.allreduce(x, name="fp16", op=hvd.Sum, compression=hvd.Compression.fp16)
    assert y.dtype == torch.float32
    assert torch.allclose(y, torch.full((6,), 0.5 * sum(range(1, hvd.size() + 1))))


def compressible(r, n=4096):
    """Rank r's float32 values: exact in neither half precision nor bfloat16."""
    return 1.0 + torch.arange(n, dtype=torch.float64) % 1000 * 1e-3 + r * 0.3333


def daemon_compressed_sum(wire):
    """What the daemons make of a Sum with Compression.fp16/bf16: each node's sum exact (float32,
    its ranks in order), cast to `wire`, summed in it between the nodes, back to float32. The model
    is exact for one or two nodes (the two halves add once, in float, rounded once)."""
    per_node = [torch.zeros(4096, dtype=torch.float32) for _ in range(hvd.cross_size())]
    for r in range(hvd.size()):
        per_node[r // hvd.local_size()] += compressible(r).float()
    if len(per_node) == 1:
        return per_node[0]
    return (per_node[0].to(wire).float() + per_node[1].to(wire).float()).to(wire).float()


def test_fp16_and_bf16_compression_is_the_daemons_on_the_inter_node_hop():
    """Compression.fp16 and .bf16 of a float32 tensor: the daemons cast each node's exact sum,
    the nodes add in half precision; the framework process never casts (one node: exact). The
    grouped form and DistributedOptimizer do the same."""
    x = compressible(hvd.rank()).float()
    fp16 = hvd.allreduce(x, name="compressed.fp16", op=hvd.Sum, compression=hvd.Compression.fp16)
    bf16 = hvd.allreduce(x, name="compressed.bf16", op=hvd.Sum, compression=hvd.Compression.bf16)
    grouped = hvd.grouped_allreduce([x, x.double()], name="compressed.grouped", op=hvd.Sum,
                                    compression=hvd.Compression.fp16)
    model = torch.nn.Linear(4096, 1, bias=False)
    with torch.no_grad():
        model.weight.zero_()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0), compression=hvd.Compression.fp16,
                                   named_parameters=model.named_parameters(), op=hvd.Sum)
    model(x.unsqueeze(0)).sum().backward()  # the gradient of w . x is x
    opt.synchronize()
    grad = model.weight.grad.reshape(-1).clone()
    with opt.skip_synchronize():
        opt.step()
    exact = sum(compressible(r) for r in range(hvd.size()))
    fp16_bound, bf16_bound = 2 * hvd.cross_size() * 2.0 ** -11, 2 * hvd.cross_size() * 2.0 ** -8
    assert fp16.dtype == torch.float32 and grouped[1].dtype == torch.float64
    assert torch.allclose(grouped[1], exact, rtol=fp16_bound, atol=0)
    assert torch.allclose(fp16.double(), exact, rtol=fp16_bound, atol=0)
    assert torch.allclose(bf16.double(), exact, rtol=bf16_bound, atol=0)
    if hvd.cross_size() <= 2:  # the model is exact
        assert torch.equal(fp16, daemon_compressed_sum(torch.float16))
        assert torch.equal(bf16, daemon_compressed_sum(torch.bfloat16))
        assert torch.equal(grouped[0], daemon_compressed_sum(torch.float16))
        assert torch.equal(grad, daemon_compressed_sum(torch.float16))
    if hvd.cross_size() > 1:
        assert (fp16.double() != exact.float().double()).sum() > 2048  # it did cross in half precision


def test_topk_and_onebit_keep_error_feedback_in_the_daemons_and_randomk_is_refused():
    """syncd's Compression.topk(ratio) and .onebit: done by the daemons with error feedback. Integer
    gradients for 4 steps, then zeros: top-k at 1/4 hands every residual over in 4 more steps, so the
    results sum to the gradients exactly (one node: exact every step); 1-bit sends each block of 32's
    sum, so the results' total is the gradients' from the start, and its residuals shrink (within
    1e-3 after 30 zero steps). A bad ratio is refused by name; Compression.randomk is withdrawn and
    refused saying why."""
    n = 5000

    def grad(step, r):
        return (torch.arange(n, dtype=torch.float64) % 7 + 1) * (r + 1) * (step + 3) % 11 - 5

    for name, compression, drain, exact in (("topk", hvd.Compression.topk(0.25), 4, True),
                                            ("onebit", hvd.Compression.onebit, 30, False)):
        applied = torch.zeros(n, dtype=torch.float64)
        for step in range(4 + drain):
            g = grad(step, hvd.rank()) if step < 4 else torch.zeros(n, dtype=torch.float64)
            applied += hvd.allreduce(g, name="feedback." + name, op=hvd.Sum, compression=compression)
        want = sum(grad(step, r) for step in range(4) for r in range(hvd.size()))
        if exact or hvd.cross_size() == 1:
            assert torch.equal(applied, want), name
        else:
            assert abs(applied.sum().item() - want.sum().item()) <= 1e-9 * want.norm(), name
            assert (applied - want).norm() <= 1e-3 * want.norm(), name
    with pytest.raises(ValueError, match="ratio"):
        hvd.Compression.topk(1.5)
    with pytest.raises(ValueError, match="random-k compression is withdrawn.*does not train under momentum"):
        hvd.Compression.randomk(0.01)


def test_powersgd_keeps_error_feedback_in_the_daemons():
    """syncd's Compression.powersgd(rank): a matrix crosses the nodes as two rank-2 factors (one
    node: exact every step), a bias as it is. Integer gradients for 4 steps, then one step of zeros
    under top-k at ratio 1, which hands the daemons' residual over (it is the tensor name's): the
    results sum to the gradients within 1e-12. A bad rank is refused by name."""
    def grad(step, r, shape):
        n = 1
        for d in shape:
            n *= d
        return ((torch.arange(n, dtype=torch.float64) % 7 + 1) * (r + 1) * (step + 3) % 11 - 5).reshape(shape)

    for name, shape in (("weight", (16, 40)), ("bias", (16,))):
        applied = torch.zeros(shape, dtype=torch.float64)
        for step in range(5):
            g = grad(step, hvd.rank(), shape) if step < 4 else torch.zeros(shape, dtype=torch.float64)
            compression = hvd.Compression.powersgd(rank=2) if step < 4 else hvd.Compression.topk(1.0)
            out = hvd.allreduce(g, name="powersgd." + name, op=hvd.Sum, compression=compression)
            if step == 0 and name == "weight" and hvd.cross_size() > 1:
                assert not torch.equal(out, sum(grad(0, r, shape) for r in range(hvd.size())))  # it was factored
            applied += out
        want = sum(grad(step, r, shape) for step in range(4) for r in range(hvd.size()))
        assert (applied - want).norm() <= 1e-12 * want.norm(), name
    for bad in (0, 2.5, 2000):
        with pytest.raises(ValueError, match="rank"):
            hvd.Compression.powersgd(rank=bad)


def test_elastic_state_saves_on_commit_restores_and_syncs_from_rank_0():
    """hvd.elastic.TorchState as Horovod's: commit() saves (and, with every rank alive, does not
    interrupt), restore() brings back the last commit, sync() makes every rank rank 0's."""
    torch.manual_seed(hvd.rank())
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    state = hvd.elastic.TorchState(model, opt, epoch=0, seen=[])
    state.epoch, state.seen = 3, [hvd.rank()]
    state.commit()
    committed = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        model.weight.add_(1.0)
    state.epoch = 7
    state.restore()
    restored_ok = state.epoch == 3 and state.seen == [hvd.rank()] and \
        all(torch.equal(committed[k], v) for k, v in model.state_dict().items())
    state.sync()
    everyone = hvd.allgather_object({k: v.clone() for k, v in model.state_dict().items()})
    assert restored_ok
    assert state.seen == [0]  # rank 0's values
    assert all(torch.equal(everyone[0][k], other[k]) for other in everyone for k in other)


def test_elastic_sampler_shards_every_index_once_over_the_ranks():
    sampler = hvd.elastic.ElasticSampler(list(range(37)), shuffle=True, seed=5)
    sampler.set_epoch(2)
    mine = list(iter(sampler))
    sampler.record_batch(0, 4)
    everyone = hvd.allgather_object(mine)
    assert len(mine) == len(sampler) == -(-37 // hvd.size())
    assert set(i for shard in everyone for i in shard) == set(range(37))
    assert sampler.state_dict() == {"epoch": 2, "processed_indices": sorted(mine[:4])}
