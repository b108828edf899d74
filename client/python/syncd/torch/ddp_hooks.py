"""DDP's gradient compression by the daemons: a communication hook for the "syncd" backend.

    from syncd.torch import Compression
    from syncd.torch.distributed import compression_hook
    ddp = DistributedDataParallel(model)
    ddp.register_comm_hook(Compression.topk(0.01), compression_hook)

Each bucket is averaged over the group by the daemons, the inter-node hop compressed as the state
asks: `Compression.fp16`, `.bf16`, `.topk(ratio)`, `.onebit` (error feedback kept
by the daemons, per bucket), `.powersgd(rank)` (per gradient: each of two or more dimensions crosses
as two factors, as torch's powerSGD_hook does), `Compression.none` (the daemon's --compression). Unlike torch's
fp16_compress_hook and powerSGD_hook, nothing is cast or compressed in the training process, and
no error-feedback buffer lives there. The state may also be a CompressionState naming a process
group other than the default. Host float32 and float64 buckets are compressed; others travel as
they are.
"""
import torch
import torch.distributed as dist

from syncd.torch.compression import POWERSGD, daemon_compression


class CompressionState:
    """compression_hook's state: a compression and the syncd process group to average over
    (None: the default group)."""

    def __init__(self, compression, process_group=None):
        self.compression = compression
        self.process_group = process_group


def _syncd_group(group):
    from syncd import _c10d
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    if not isinstance(pg, _c10d.ProcessGroupSyncd):
        raise ValueError("syncd's compression_hook needs a process group of the 'syncd' backend, got %s"
                         % type(pg).__name__)
    return pg


def compression_hook(state, bucket):
    """DDP communication hook (register_comm_hook(state, compression_hook)): the bucket's average,
    compressed between nodes by the daemons. The bucket is named by its index and size, which
    recur every step, so top-k's, random-k's and 1-bit's residuals meet their bucket again."""
    if isinstance(state, CompressionState):
        compression, group = state.compression, state.process_group
    else:
        compression, group = state, None
    pg = _syncd_group(group)
    tensor = bucket.buffer()
    name = "ddp.bucket.%d.%d" % (bucket.index(), tensor.numel())
    code = daemon_compression(compression, tensor)
    if code & 0xff == POWERSGD:
        # A matrix per gradient (views of the bucket, in its parameters' shapes), averaged in place,
        # named by its place in the bucket and its size (stable once DDP has rebuilt its buckets
        # after the first step, as torch's powerSGD_hook assumes).
        works = [pg.allreduce_named(g, "%s.%d.%d" % (name, i, g.numel()), code)
                 for i, g in enumerate(bucket.gradients())]
        done = torch.futures.collect_all([w.get_future() for w in works])
        return done.then(lambda fut: tensor)
    work = pg.allreduce_named(tensor, name, code)
    return work.get_future().then(lambda fut: fut.value()[0])


__all__ = ["CompressionState", "compression_hook"]
