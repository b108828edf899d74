"""syncd.torch with CUDA tensors, on every rank of a syncrun job (all ranks of a node may share one
GPU): the daemon reduces device memory in place through CUDA IPC and NCCL. Skipped where torch
sees no GPU.

    PYTHONPATH=build/python build/bin/syncrun -n 2 -- python3 -m pytest tests/python/test_torch_gpu.py
"""

import pytest
import torch

import syncd.torch as hvd
from training_check import distributed_matches_single_process

if not torch.cuda.is_available():
    pytest.skip("no CUDA device visible to torch", allow_module_level=True)

DTYPES = [torch.uint8, torch.int8, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32,
          torch.float64]


@pytest.fixture(scope="module", autouse=True)
def job():
    hvd.init()
    torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
    yield
    hvd.shutdown()


def rank_data(r, dtype, n):
    return ((torch.arange(n, dtype=torch.int64) % 5) + r + 1).to(dtype)


def expected_sum(dtype, n):
    return sum(rank_data(r, torch.int64, n) for r in range(hvd.size())).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [1, 1000, 1 << 20])
def test_allreduce_of_cuda_tensors_is_exact_and_stays_on_the_gpu(dtype, n):
    t = rank_data(hvd.rank(), dtype, n).cuda()
    out = hvd.allreduce(t, op=hvd.Sum, name="gpu.sum.%s.%d" % (dtype, n))
    inplace = t.clone()
    hvd.allreduce_(inplace, op=hvd.Sum, name="gpu.inplace.%s.%d" % (dtype, n))
    assert out.is_cuda and out.device == t.device
    assert torch.equal(out.cpu(), expected_sum(dtype, n))
    assert torch.equal(inplace.cpu(), expected_sum(dtype, n))
    assert torch.equal(t.cpu(), rank_data(hvd.rank(), dtype, n))  # the out-of-place input is untouched


def test_average_non_contiguous_and_grouped():
    base = torch.arange(64, dtype=torch.float32, device="cuda").reshape(8, 8) * (hvd.rank() + 1)
    t = base.t()  # not contiguous
    avg = hvd.allreduce(t, name="gpu.avg.noncontig")
    scale = sum(r + 1 for r in range(hvd.size())) / hvd.size()
    assert torch.allclose(avg, torch.arange(64, dtype=torch.float32, device="cuda").reshape(8, 8).t() * scale)
    parts = [torch.full((k + 1,), float(hvd.rank() + k), device="cuda") for k in range(5)]
    outs = hvd.grouped_allreduce(parts, op=hvd.Sum, name="gpu.grouped")
    for k, o in enumerate(outs):
        assert torch.equal(o.cpu(), torch.full((k + 1,), float(sum(r + k for r in range(hvd.size())))))


def test_the_daemon_waits_for_the_current_stream():
    # The tensor is produced by a kernel still queued on a side stream when the call is made.
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        x = torch.ones(1 << 24, device="cuda")
        for _ in range(20):
            x = x * 1.0 + 0.0  # queued work; nothing synchronises the host
        x.add_(hvd.rank())
        h = hvd.allreduce_async_(x, op=hvd.Sum, name="gpu.stream")
    out = hvd.synchronize(h)
    want = float(sum(r + 1 for r in range(hvd.size())))
    assert torch.equal(out[:1000].cpu(), torch.full((1000,), want))


@pytest.mark.parametrize("root", [0, 1])
def test_broadcast_parameters_of_a_cuda_model(root):
    torch.manual_seed(hvd.rank())
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).cuda()
    hvd.broadcast_parameters(model.state_dict(), root_rank=root % hvd.size())
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = hvd.allgather(flat.unsqueeze(0), name="gpu.bcast.check.%d" % root)
    assert all(torch.equal(gathered[0], gathered[r]) for r in range(hvd.size()))


def test_distributed_optimizer_on_cuda_matches_single_process_training():
    assert distributed_matches_single_process(hvd, device="cuda") == []


def test_mismatched_memory_raises_on_every_rank():
    t = torch.ones(10, device="cuda" if hvd.rank() == 0 else "cpu")
    with pytest.raises(hvd.HorovodInternalError, match="memory"):
        hvd.allreduce(t, name="gpu.where")


def test_allgather_alltoall_reducescatter_of_cuda_tensors_come_back_on_the_gpu():
    # No GPU path for these kinds yet: the binding stages them through host memory.
    n, me = hvd.size(), hvd.rank()
    gathered = hvd.allgather(torch.full((me + 1, 2), float(me), device="cuda"), name="gpu.ag")
    exchanged = hvd.alltoall(torch.arange(n, dtype=torch.float32, device="cuda") + 10 * me, name="gpu.a2a")
    scattered = hvd.reducescatter(torch.ones(n, 3, device="cuda"), name="gpu.rs", op=hvd.Sum)
    assert gathered.is_cuda and exchanged.is_cuda and scattered.is_cuda
    assert torch.equal(gathered.cpu(), torch.cat([torch.full((r + 1, 2), float(r)) for r in range(n)]))
    assert exchanged.cpu().tolist() == [float(me + 10 * s) for s in range(n)]
    assert torch.equal(scattered.cpu(), torch.full((1, 3), float(n)))
