"""syncd.torch process sets against horovod.torch 0.28's API, on every rank of a 4-rank syncrun
job (ctest: 2 nodes x 2 ranks, and 1 node x 4): sets within a node, across nodes, overlapping,
added at init and at run time, removed under traffic; every collective and helper with
process_set=; errors on every rank. Collectives first, assertions after."""

import pytest
import torch

import syncd.torch as hvd

WITHIN = [0, 1]      # node 0 on 2 x 2
ACROSS = [1, 2]      # both nodes on 2 x 2
UNEVEN = [0, 1, 3]   # two ranks on node 0, one on node 1
EVEN_RANKS = [0, 2]


@pytest.fixture(scope="module", autouse=True)
def job():
    sets = [hvd.ProcessSet(WITHIN), hvd.ProcessSet(ACROSS), hvd.ProcessSet(UNEVEN)]
    hvd.init(process_sets=sets)
    yield sets
    hvd.shutdown()


def test_process_set_objects_match_horovods(job):
    within, across, uneven = job
    me = hvd.rank()
    assert hvd.global_process_set.process_set_id == 0
    assert hvd.global_process_set.size() == hvd.size() and hvd.global_process_set.rank() == me
    assert [ps.process_set_id for ps in job] == [1, 2, 3]
    assert repr(within) == "ProcessSet(process_set_id=1, ranks=[0, 1], mpi_comm=None)"
    for ps, ranks in zip(job, [WITHIN, ACROSS, UNEVEN]):
        assert ps.size() == len(ranks)
        assert ps.included() == (me in ranks)
        assert ps.rank() == (ranks.index(me) if me in ranks else None)
    fresh = hvd.ProcessSet([3, 0])
    assert fresh.ranks == [0, 3] and fresh.process_set_id is None and fresh.size() is None


def values(r):
    return torch.tensor([float(r + 1), 1.0])


@pytest.mark.parametrize("which", [0, 1, 2])
def test_every_collective_in_a_set(job, which):
    ps = job[which]
    ranks = ps.ranks
    me = hvd.rank()
    results = {}
    if ps.included():
        results["sum"] = hvd.allreduce(values(me), op=hvd.Sum, process_set=ps, name="s")
        results["avg"] = hvd.allreduce(values(me), process_set=ps)  # unnamed, Average
        results["grouped"] = hvd.grouped_allreduce([values(me), 2 * values(me)], op=hvd.Sum, process_set=ps)
        results["bcast"] = hvd.broadcast(torch.tensor([float(me)]), root_rank=ranks[-1], process_set=ps)
        results["gather"] = hvd.allgather(torch.full((me + 1,), float(me)), process_set=ps)
        results["a2a"] = hvd.alltoall(torch.tensor([float(me * 10 + d) for d in range(len(ranks))]), process_set=ps)
        results["rs"] = hvd.reducescatter(torch.ones(len(ranks) + 1, 2), op=hvd.Sum, process_set=ps)
        results["obj"] = hvd.allgather_object(me, process_set=ps)
        results["bobj"] = hvd.broadcast_object({"root": me}, root_rank=ranks[0], process_set=ps)
        hvd.barrier(process_set=ps)
    hvd.barrier()
    if not ps.included():
        return
    total = sum(values(r) for r in ranks)
    assert torch.equal(results["sum"], total)
    assert torch.allclose(results["avg"], total / len(ranks))
    assert torch.equal(results["grouped"][1], 2 * total)
    assert results["bcast"].item() == float(ranks[-1])
    assert torch.equal(results["gather"], torch.cat([torch.full((r + 1,), float(r)) for r in ranks]))
    assert results["a2a"].tolist() == [float(s * 10 + ps.rank()) for s in ranks]
    assert torch.equal(results["rs"], torch.full((2 if ps.rank() == 0 else 1, 2), float(len(ranks))))
    assert results["obj"] == ranks and results["bobj"] == {"root": ranks[0]}


def test_gradients_within_a_set(job):
    across = job[1]
    x = torch.ones(3, requires_grad=True)
    if across.included():
        (hvd.allreduce(x, op=hvd.Sum, process_set=across, name="grad") * (hvd.rank() + 1)).sum().backward()
    hvd.barrier()
    if across.included():
        # d/dx of sum over the set's ranks of (allreduce(x) * (r + 1)): allreduce of the weights.
        assert torch.allclose(x.grad, torch.full((3,), float(sum(r + 1 for r in ACROSS))))


def test_distributed_optimizer_and_broadcast_parameters_in_a_set(job):
    within = job[0]
    torch.manual_seed(hvd.rank())
    model = torch.nn.Linear(4, 1)
    if within.included():
        hvd.broadcast_parameters(model.state_dict(), root_rank=0, process_set=within)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters(), process_set=within)
        model(torch.full((2, 4), float(hvd.rank()))).sum().backward()
        opt.step()
        weights = hvd.allgather(model.weight.detach(), process_set=within)
    hvd.barrier()
    if within.included():
        assert torch.equal(weights[0], weights[1]), "the set's ranks diverged"


def test_errors_raise_on_every_rank_and_the_job_goes_on(job):
    within = job[0]
    me = hvd.rank()
    if not within.included():
        with pytest.raises(ValueError, match="is not in"):
            hvd.allreduce(torch.ones(1), process_set=within)
    else:
        with pytest.raises(ValueError, match="not a rank of process set"):
            hvd.broadcast(torch.ones(1), root_rank=3, process_set=within)
    with pytest.raises(ValueError, match="has not been added"):
        hvd.allreduce(torch.ones(1), process_set=hvd.ProcessSet([0, 1]))
    with pytest.raises(hvd.HorovodInternalError, match="mismatched process set"):
        hvd.add_process_set([0, 3] if me == 3 else [0, 2])
    assert hvd.remove_process_set(hvd.global_process_set) is False
    y = hvd.allreduce(torch.ones(1), op=hvd.Sum)
    assert y.item() == hvd.size()


def test_dynamic_sets_under_traffic():
    me = hvd.rank()
    for round_ in range(10):
        handle = hvd.allreduce_async(torch.ones(1000), op=hvd.Sum, name="traffic.%d" % round_)
        ps = hvd.add_process_set(EVEN_RANKS if round_ % 2 == 0 else [1, 3])
        got = hvd.allreduce(torch.ones(1), op=hvd.Sum, process_set=ps) if ps.included() else None
        assert hvd.remove_process_set(ps) is True
        assert ps.process_set_id is None
        total = hvd.synchronize(handle)
        assert total[0].item() == hvd.size()
        if got is not None:
            assert got.item() == 2.0
    with pytest.raises(ValueError, match="has not been added"):
        hvd.allreduce(torch.ones(1), process_set=ps)
    assert me in range(hvd.size())
