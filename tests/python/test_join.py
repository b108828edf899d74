"""hvd.join on every rank of a 4-rank syncrun job (ctest: 1 node x 4 and 2 nodes x 2): training on
uneven data per rank finishes and matches the single-process computation on the same samples;
joined ranks add nothing to the others' allreduces and allgathers."""

import pytest
import torch

import syncd.torch as hvd


@pytest.fixture(scope="module", autouse=True)
def job():
    hvd.init()
    yield
    hvd.shutdown()


def batch(rank, step):
    g = torch.Generator().manual_seed(1000 * rank + step)
    x = torch.randn(2, 4, generator=g, dtype=torch.float64)
    return x, x.sum(1, keepdim=True) * 0.5


def steps(rank):
    return rank + 2  # uneven: rank 3 trains longest


def test_training_with_uneven_data_finishes_and_matches_single_process():
    n, me = hvd.size(), hvd.rank()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1).double()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    for k in range(steps(me)):
        opt.zero_grad()
        x, y = batch(me, k)
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    last = hvd.join()
    hvd.broadcast_parameters(model.state_dict(), root_rank=last)
    assert last == n - 1
    # Single process: each step averages the gradients of the ranks still training (a joined
    # rank adds zeros) over every rank.
    ref = torch.nn.Linear(4, 1).double()
    ref.load_state_dict(start)
    for k in range(max(steps(r) for r in range(n))):
        grads = None
        for r in range(n):
            if steps(r) <= k:
                continue
            ref.zero_grad()
            x, y = batch(r, k)
            torch.nn.functional.mse_loss(ref(x), y).backward()
            g = [p.grad.clone() for p in ref.parameters()]
            grads = g if grads is None else [a + b for a, b in zip(grads, g)]
        with torch.no_grad():
            for p, g in zip(ref.parameters(), grads):
                p -= 0.1 * g / n
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert torch.allclose(p, q), name


def test_joined_ranks_add_nothing_and_join_returns_the_last_rank():
    n, me = hvd.size(), hvd.rank()
    sums, gathers = [], []
    for k in range(me + 1):  # rank r takes part in r + 1 rounds
        sums.append(hvd.allreduce(torch.ones(2), op=hvd.Sum, name="join.sum.%d" % k))
        gathers.append(hvd.allgather(torch.tensor([me]), name="join.gather.%d" % k))
    last = hvd.join()
    assert last == n - 1
    for k, (s, g) in enumerate(zip(sums, gathers)):
        active = [r for r in range(n) if r + 1 > k]
        assert s.tolist() == [float(len(active))] * 2
        assert g.tolist() == active


# Where syncd does more than Horovod (the join row of docs/pages/status.md): Horovod raises on the ranks that have
# not joined when an allgather or alltoall meets a joined rank; syncd's go on without the joined
# ranks' rows. A broadcast whose root joined fails on every rank that has not joined, naming it.
def test_joined_ranks_send_no_rows_and_a_joined_root_fails_the_broadcast_on_every_rank():
    n, me = hvd.size(), hvd.rank()
    gathered = a2a = error = None
    if me != 0:
        gathered = hvd.allgather(torch.tensor([me, me]), name="join.superset.gather")
        a2a, received = hvd.alltoall(torch.arange(n) + 10 * me, splits=[1] * n, name="join.superset.a2a")
        try:
            hvd.broadcast(torch.ones(2), root_rank=0, name="join.superset.bcast")
        except hvd.HorovodInternalError as e:
            error = str(e)
    last = hvd.join()
    assert last != 0
    if me != 0:
        assert gathered.tolist() == [r for r in range(1, n) for _ in range(2)]
        assert a2a.tolist() == [10 * s + me for s in range(1, n)] and received.tolist() == [0] + [1] * (n - 1)
        assert error is not None and "root, rank 0, has joined" in error, error
