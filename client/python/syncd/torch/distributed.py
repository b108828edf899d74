"""syncd as a torch.distributed backend.

    import syncd.torch.distributed  # registers the backend "syncd"
    import torch.distributed as dist
    dist.init_process_group("syncd")

Run under `syncrun` (it sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, as torchrun does), or
under Slurm with syncd's prolog. The process group shares this process's attachment to its node's
daemon with `syncd.torch` (hvd.init), so both APIs can be used in one job.
"""
import os

import torch.distributed as dist

from syncd.torch import basics

try:
    from syncd import _c10d
except ImportError as e:  # built only where libtorch-dev was found
    _c10d = None
    _import_error = e


def _create(store, rank, world_size, timeout):
    if _c10d is None:
        raise RuntimeError(f"syncd backend: this build of syncd has no torch.distributed backend "
                           f"(build it with Debian's libtorch-dev installed): {_import_error}")
    if not basics.is_initialized():
        try:
            basics.init()
        except Exception as e:
            raise RuntimeError(f"syncd backend: rank {rank} of {world_size} could not attach to a syncd daemon "
                               f"(SYNCD_RUN_DIR={os.environ.get('SYNCD_RUN_DIR', 'unset')}): {e}") from e
    client = basics._client_obj
    if world_size != client.size:
        raise RuntimeError(f"syncd backend: a process group of {world_size} ranks (torch.distributed.new_group) "
                           f"is not supported yet; the job has {client.size}")
    return _c10d.ProcessGroupSyncd(store, rank, world_size, timeout, client.address, client)


if "SYNCD" not in dist.Backend._plugins:
    dist.Backend.register_backend("syncd", _create)
