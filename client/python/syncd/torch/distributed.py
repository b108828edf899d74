"""syncd as a torch.distributed backend.

    import syncd.torch.distributed  # registers the backend "syncd"
    import torch.distributed as dist
    dist.init_process_group("syncd")

Run under `syncrun` (it sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, as torchrun does), or
under srun with syncd's Slurm prolog: where those are unset they are taken from Slurm's variables
(MASTER_ADDR: the job's first node; MASTER_PORT: 20000 + the job id modulo 20000). The process
group shares this process's attachment to its node's
daemon with `syncd.torch` (hvd.init), so both APIs can be used in one job.
"""
import os
import socket
import subprocess

import torch.distributed as dist

from syncd.torch import basics

try:
    from syncd import _c10d
except ImportError as e:  # built only where libtorch-dev was found
    _c10d = None
    _import_error = e


def _node_address(node):
    """Where torch's store reaches Slurm node `node`: its name where that resolves, else the
    NodeAddr Slurm has for it (node names need not be host names)."""
    try:
        socket.getaddrinfo(node, None)
        return node
    except OSError:
        pass
    try:
        out = subprocess.run(["scontrol", "show", "node", "-o", node], capture_output=True, text=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise RuntimeError(f"syncd backend: Slurm node {node!r} is not a host name and scontrol cannot say its "
                           f"address (set MASTER_ADDR yourself): {e}") from e
    for field in out.split():
        if field.startswith("NodeAddr="):
            return field[len("NodeAddr="):]
    raise RuntimeError(f"syncd backend: scontrol shows no NodeAddr for Slurm node {node!r} (set MASTER_ADDR yourself)")


def _env_from_slurm(env=os.environ):
    """torch's env:// variables from Slurm's, where nothing (syncrun, torchrun) set them."""
    if "SLURM_PROCID" not in env:
        return
    env.setdefault("RANK", env["SLURM_PROCID"])
    env.setdefault("WORLD_SIZE", env.get("SLURM_NTASKS", "1"))
    env.setdefault("LOCAL_RANK", env.get("SLURM_LOCALID", "0"))
    if "MASTER_ADDR" not in env:
        nodes = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or "127.0.0.1"
        first = nodes.split(",")[0]
        if "[" in nodes:  # a compressed list: let Slurm expand it
            try:
                first = subprocess.run(["scontrol", "show", "hostnames", nodes], capture_output=True, text=True,
                                       check=True).stdout.split()[0]
            except (OSError, subprocess.CalledProcessError, IndexError) as e:
                raise RuntimeError(f"syncd backend: cannot find the first node of {nodes!r} for MASTER_ADDR "
                                   f"(set MASTER_ADDR yourself): {e}") from e
        env["MASTER_ADDR"] = _node_address(first)
    env.setdefault("MASTER_PORT", str(20000 + int(env.get("SLURM_JOB_ID", "0")) % 20000))


_env_from_slurm()

# new_group(ranks, backend="syncd"): every rank of the job calls new_group (torch requires it),
# but torch builds the group only on its members. A syncd process set must be added by every rank,
# so it is added where torch's helper runs on every rank, and the members' groups take it.
_sets = {}  # sorted ranks -> process set ids added for groups not built yet, oldest first
_original_helper = dist.distributed_c10d._new_process_group_helper


def _attach(rank, world_size):
    if not basics.is_initialized():
        try:
            basics.init()
        except Exception as e:
            raise RuntimeError(f"syncd backend: rank {rank} of {world_size} could not attach to a syncd daemon "
                               f"(SYNCD_RUN_DIR={os.environ.get('SYNCD_RUN_DIR', 'unset')}): {e}") from e
    return basics._client_obj


def _helper(group_size, group_rank, global_ranks_in_group, backend, store, *args, **kwargs):
    if global_ranks_in_group and str(backend).lower() == "syncd":
        ranks = tuple(sorted(int(r) for r in global_ranks_in_group))
        client = _attach(dist.get_rank(), dist.get_world_size())
        _sets.setdefault(ranks, []).append(client.add_process_set(list(ranks)))
    return _original_helper(group_size, group_rank, global_ranks_in_group, backend, store, *args, **kwargs)


dist.distributed_c10d._new_process_group_helper = _helper


def _create(opts, pg_options=None):
    if _c10d is None:
        raise RuntimeError(f"syncd backend: this build of syncd has no torch.distributed backend "
                           f"(build it with Debian's libtorch-dev installed): {_import_error}")
    client = _attach(opts.group_rank, opts.group_size)
    ranks = [int(r) for r in opts.global_ranks_in_group]
    process_set = 0
    if ranks and len(ranks) != client.size:
        pending = _sets.get(tuple(sorted(ranks)))
        if not pending:
            raise RuntimeError(f"syncd backend: no syncd process set for group {sorted(ranks)} "
                               "(create groups with torch.distributed.new_group on every rank)")
        process_set = pending.pop(0)
    return _c10d.ProcessGroupSyncd(opts.store, opts.group_rank, opts.group_size, opts.timeout, client.address, client,
                                   process_set, sorted(ranks) if process_set else [], str(opts.group_id))


def _refuse_shutdown_under_live_groups():
    # A syncd process group uses this process's attachment: detaching under it would leave the
    # group with a freed client.
    if _c10d is None:
        return
    live = [pg for pg in list(dist.distributed_c10d._pg_map) if isinstance(pg, _c10d.ProcessGroupSyncd)]
    if live:
        raise RuntimeError("syncd.torch.shutdown(): %d torch.distributed process group(s) over syncd are still "
                           "alive; call torch.distributed.destroy_process_group() first" % len(live))


basics._shutdown_hooks.insert(0, _refuse_shutdown_under_live_groups)

if "SYNCD" not in dist.Backend._plugins:
    dist.Backend.register_backend("syncd", _create, extended_api=True)
