"""hvd.partial_allreduce and DistributedOptimizer(partial=...) on every rank of a 4-rank syncrun
job (ctest: 1 node x 4 and 2 nodes x 2): solo rounds lose nothing, majority's initiator is the
same on every rank, quorum=size waits for everyone, and eager-SGD training with a periodic full
synchronisation ends with the same model on every rank and a low loss."""
import time

import pytest
import torch

import syncd.torch as hvd


@pytest.fixture(scope="module", autouse=True)
def job():
    hvd.init()
    yield
    hvd.shutdown()


def rounds_of_every_rank(mine):
    """{round: value} over every rank's records (each rank saw some rounds)."""
    merged = {}
    for records in hvd.allgather_object(mine):
        for r, v in records.items():
            assert merged.get(r, v) == v, "round %d differs between ranks: %r and %r" % (r, merged[r], v)
            merged[r] = v
    return merged


def test_solo_rounds_add_up_to_every_contribution():
    n, me = hvd.size(), hvd.rank()
    seen, calls = {}, 0
    for k in range(20):
        if (k + me) % 3 == 0:
            time.sleep(0.002 * (me + 1))
        v = torch.zeros(n)
        v[me] = 1
        out = hvd.partial_allreduce(v, name="solo", mode="solo", op=hvd.Sum)
        calls += 1
        info = out.partial_info
        assert isinstance(info, hvd.PartialInfo)
        assert 1 <= info.nap <= n and 0 <= info.initiator < n and info.round >= 1
        seen[info.round] = tuple(out.tolist())
    hvd.barrier()
    if me == 0:  # alone: the second call is fresh at the latest, and takes what is left
        for _ in range(2):
            v = torch.zeros(n)
            v[me] = 1
            out = hvd.partial_allreduce(v, name="solo", mode="solo", op=hvd.Sum)
            calls += 1
            seen[out.partial_info.round] = tuple(out.tolist())
            if out.partial_info.fresh:
                break
        assert out.partial_info.fresh
    hvd.barrier()
    rounds = rounds_of_every_rank(seen)
    assert sorted(rounds) == list(range(1, len(rounds) + 1)), "a round is missing"
    total = [sum(col) for col in zip(*rounds.values())]
    assert total[me] == calls, "rank %d: %s over %d rounds" % (me, total, len(rounds))


def test_majority_initiator_and_nap_are_the_same_on_every_rank():
    me = hvd.rank()
    seen, info = {}, None
    while info is None or info.round < 12:
        if me % 2:
            time.sleep(0.001)
        out = hvd.partial_allreduce(torch.ones(2), name="majority", mode="majority")
        info = out.partial_info
        seen[info.round] = (info.initiator, info.nap)
        if info.fresh and info.initiator == me:
            seen[-info.round] = "initiator fresh"
    rounds = rounds_of_every_rank(seen)
    for r in range(1, 13):
        assert r in rounds and -r in rounds, "round %d: %r" % (r, rounds.get(r))


def test_quorum_of_the_whole_set_averages_every_rank():
    n, me = hvd.size(), hvd.rank()
    out = hvd.partial_allreduce(torch.full((3,), float(me + 1)), name="quorum", mode="solo", quorum=n)
    assert out.partial_info.nap == n and out.partial_info.fresh
    assert out.tolist() == [(n + 1) / 2.0] * 3  # Average: over the n tensors summed


def test_bad_arguments_are_value_errors():
    t = torch.ones(2)
    with pytest.raises(ValueError, match="'solo' or 'majority'"):
        hvd.partial_allreduce(t, name="bad", mode="all")
    with pytest.raises(ValueError, match="quorum must be an int from 1 to"):
        hvd.partial_allreduce(t, name="bad", quorum=hvd.size() + 1)
    with pytest.raises(ValueError, match="op=Average or op=Sum"):
        hvd.partial_allreduce(t, name="bad", op=hvd.Max)
    opt = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1)
    with pytest.raises(ValueError, match="partial must be"):
        hvd.DistributedOptimizer(opt, partial="some")
    with pytest.raises(ValueError, match="go with partial="):
        hvd.DistributedOptimizer(opt, full_sync_every=3)


@pytest.mark.parametrize("mode", ["solo", "majority"])
def test_eager_sgd_trains_and_the_full_sync_makes_every_rank_agree(mode):
    me = hvd.rank()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                   named_parameters=[(mode + "." + k, v) for k, v in model.named_parameters()],
                                   partial=mode, full_sync_every=10)
    w = torch.arange(8, dtype=torch.float32).unsqueeze(1) / 8
    g = torch.Generator().manual_seed(me)
    naps = []
    for step in range(60):
        if step % 4 == me % 4:
            time.sleep(0.003)  # one rank at a time is slow
        x = torch.randn(16, 8, generator=g)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), x @ w).backward()
        opt.step()
        naps.append(opt.partial_info.nap)
    assert all(1 <= k <= hvd.size() for k in naps)
    # Step 60 was a full synchronisation: the parameters are the same on every rank.
    params = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    for other in hvd.allgather_object(params):
        assert torch.equal(other, params)
    x = torch.randn(256, 8, generator=torch.Generator().manual_seed(99))
    loss = torch.nn.functional.mse_loss(model(x), x @ w).item()
    assert loss < 0.05, "loss %.4f after 60 partial steps" % loss
