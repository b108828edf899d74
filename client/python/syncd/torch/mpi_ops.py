"""Collectives with horovod.torch's names, defaults and semantics.

Every call submits to the node's syncd and returns a handle (the *_async forms) or waits for it.
Tensors are matched across ranks by name; unnamed calls get "<op>.noname.<n>", so every rank
must make its unnamed calls in the same order, as with Horovod.

Where the data lives: a tensor already in the client's shared arena (DistributedOptimizer's
gradients) is reduced in place by the daemon with no copy. Any other tensor is copied into an
arena block at submission and the result copied out at completion (one copy each way).

Errors: ValueError at submission for bad arguments or a name already in flight on this rank;
HorovodInternalError (a RuntimeError) from synchronize() for a collective that failed, on every
rank (mismatched shapes, dtypes, ops or roots, a lost rank or daemon). A tensor this rank refuses
(an unsupported type, say) still takes part under its name: the other ranks' requests of that name
fail naming this rank, instead of waiting for it, and unnamed calls stay in step.
"""
# horovod.torch.mpi_ops holds every collective; so does this module (scripts import from it), the
# code lives in requests (handles), inplace_ops (allreduce, broadcast, join, barrier) and
# gather_scatter (allgather, alltoall, reducescatter, sparse allreduce).
from syncd.torch.basics import Adasum, Average, Max, Min, Product, Sum  # noqa: F401
from syncd.torch.gather_scatter import (  # noqa: F401
    allgather, allgather_async, alltoall, alltoall_async, grouped_allgather, grouped_allgather_async,
    grouped_reducescatter, grouped_reducescatter_async, reducescatter, reducescatter_async, sparse_allreduce_async)
from syncd.torch.inplace_ops import (  # noqa: F401
    allreduce, allreduce_, allreduce_async, allreduce_async_, barrier, broadcast, broadcast_, broadcast_async,
    broadcast_async_, grouped_allreduce, grouped_allreduce_, grouped_allreduce_async, grouped_allreduce_async_, join)
from syncd.torch.requests import HorovodInternalError, poll, synchronize  # noqa: F401
