"""syncd.torch: Horovod's PyTorch API over the node's syncd daemon.

    import syncd.torch as hvd
    hvd.init()
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

Run under `syncrun -N <nodes> -n <ranks>`, or `srun` with syncd's Slurm prolog.
"""
from syncd.errors import SyncdError
from syncd.torch.basics import (Adasum, Average, Max, Min, Product, Sum, ccl_built, coord_mode, cross_rank,
                                cross_size, cuda_built, ddl_built, gloo_built, gloo_enabled, is_homogeneous,
                                is_initialized, local_rank, local_size, mpi_built, mpi_enabled,
                                mpi_threads_supported, nccl_built, rank, rocm_built, shutdown, size, start_timeline,
                                stop_timeline)
from syncd.torch.compression import Compression
from syncd.torch.functions import (allgather_object, broadcast_object, broadcast_optimizer_state,
                                   broadcast_parameters)
from syncd.torch.mpi_ops import (HorovodInternalError, allgather, allgather_async, allreduce, allreduce_,
                                 allreduce_async, allreduce_async_, alltoall, alltoall_async, barrier, broadcast,
                                 broadcast_, broadcast_async, broadcast_async_, grouped_allgather,
                                 grouped_allgather_async, grouped_allreduce, grouped_allreduce_,
                                 grouped_allreduce_async, grouped_allreduce_async_, grouped_reducescatter,
                                 grouped_reducescatter_async, join, poll, reducescatter, reducescatter_async,
                                 sparse_allreduce_async, synchronize)
from syncd.torch.optimizer import DistributedOptimizer
from syncd.torch.partial import (PartialInfo, partial_allreduce, partial_allreduce_async,
                                 partial_allreduce_async_)
from syncd.torch.process_sets import ProcessSet, add_process_set, global_process_set, init, remove_process_set
from syncd.torch.sync_batch_norm import SyncBatchNorm
from syncd.torch import elastic  # noqa: E402 (hvd.elastic.run, TorchState, ElasticSampler)
from syncd.torch.elastic import HostsUpdatedInterrupt
