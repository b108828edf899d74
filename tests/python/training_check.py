"""DistributedOptimizer against one process training on the concatenated batch, shared by the
CPU and GPU suites (run on every rank of a job)."""

import torch


def make_model(seed=0, device="cpu"):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)).to(device)


def shard(step, r, per_rank=4, device="cpu"):
    g = torch.Generator().manual_seed(1000 * step + r)
    return torch.randn(per_rank, 6, generator=g).to(device), torch.randn(per_rank, 3, generator=g).to(device)


def distributed_matches_single_process(hvd, device="cpu", steps=20):
    """Trains with hvd.DistributedOptimizer from rank 0's weights, then the same steps in this
    process on every rank's batch at once; returns the names of parameters that differ."""
    model = make_model(seed=hvd.rank(), device=device)  # differs per rank until broadcast
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    for step in range(steps):
        x, y = shard(step, hvd.rank(), device=device)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    ref = make_model(seed=0, device=device)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    for step in range(steps):
        parts = [shard(step, r, device=device) for r in range(hvd.size())]
        x, y = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(ref(x), y).backward()
        ref_opt.step()
    assert all(p.grad.device.type == torch.device(device).type for p in model.parameters())  # stayed put
    return [name for (name, p), q in zip(model.named_parameters(), ref.parameters()) if not torch.allclose(p, q, atol=1e-5)]
