"""syncd as a torch.distributed backend.

    import syncd.torch.distributed  # registers the backend "syncd"
    import torch.distributed as dist
    dist.init_process_group("syncd")

Run under `syncrun` (it sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, as torchrun does), or
under srun with syncd's Slurm prolog: where those are unset they are taken from Slurm's variables
(MASTER_ADDR: the job's first node; MASTER_PORT: 20000 + the job id modulo 20000). The process
group shares this process's attachment to its node's
daemon with `syncd.torch` (hvd.init), so both APIs can be used in one job.

After a loss (`syncrun --elastic`, `--on-loss continue`): `init_method="syncd://"` numbers the job's
live ranks 0..n-1 in launch order and gives them a store of their own (held by the new rank 0), so
the survivors, the same processes on the same daemons, make the default group again at the new
world size; DDP built on it averages over them:

    dist.init_process_group("syncd", init_method="syncd://")
    ...
    except RuntimeError:                 # restore: a collective without the lost rank failed
        dist.destroy_process_group()
        dist.init_process_group("syncd", init_method="syncd://")   # the survivors, renumbered
        model = DDP(model.module)        # DDP broadcasts rank 0's parameters

Under `continue` nothing fails: `ranks_changed()`, called by every rank at the same point (a step
boundary), says whether ranks were lost or a replacement (`syncrun --respawn`) waits to join; the
replacement's own `init_process_group("syncd", init_method="syncd://")` meets it there.

DDP's gradients compressed by the daemons (fp16, bf16, top-k, random-k, 1-bit with error feedback):
`ddp.register_comm_hook(Compression.topk(0.01), compression_hook)` (syncd/torch/ddp_hooks.py).
"""
import os
import socket
import subprocess
import time
from urllib.parse import parse_qsl, urlparse

import torch
import torch.distributed as dist

from syncd.torch import basics, requests
from syncd.torch.ddp_hooks import CompressionState, compression_hook  # noqa: F401  (DDP's comm hook)
from syncd.torch.functions import allgather_object, broadcast_object
from syncd.torch.gather_scatter import allgather
from syncd.torch.requests import HorovodInternalError

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
        ranks = tuple(_launch_ranks(global_ranks_in_group))
        client = _attach(dist.get_rank(), dist.get_world_size())
        _sets.setdefault(ranks, []).append(client.add_process_set(list(ranks)))
    return _original_helper(group_size, group_rank, global_ranks_in_group, backend, store, *args, **kwargs)


dist.distributed_c10d._new_process_group_helper = _helper


def _launch_ranks(group_ranks):
    """The launch ranks of ranks as the default group numbers them (the live ranks' after a
    syncd:// init), sorted."""
    return sorted(basics.launch_rank(int(r)) for r in group_ranks)


def _create(opts, pg_options=None):
    if _c10d is None:
        raise RuntimeError(f"syncd backend: this build of syncd has no torch.distributed backend "
                           f"(build it with Debian's libtorch-dev installed): {_import_error}")
    client = _attach(opts.group_rank, opts.group_size)
    job = list(range(client.size))
    # The default group (no ranks): the job's live ranks, or the job as launched.
    ranks = _launch_ranks(opts.global_ranks_in_group or range(opts.group_size))
    process_set = 0
    if opts.global_ranks_in_group and ranks != job:
        pending = _sets.get(tuple(ranks))
        if not pending:
            raise RuntimeError(f"syncd backend: no syncd process set for group {ranks} "
                               "(create groups with torch.distributed.new_group on every rank)")
        process_set = pending.pop(0)
    group = str(opts.group_id) if _generation <= 0 else "g%d.%s" % (_generation, opts.group_id)
    return _c10d.ProcessGroupSyncd(opts.store, opts.group_rank, opts.group_size, opts.timeout, client.address, client,
                                   process_set, [] if ranks == job else ranks, group)


# init_method="syncd://": the job's live ranks. Each rank says why it takes part in the members'
# allgather: a check (ranks_changed), an init, or a replacement's first init, which meets whichever
# the others call next: their check (they see it and init again, it with them) or their init.
_AT_CHECK, _AT_INIT, _JOINING = 0, 1, 2
_generation = -1  # the last syncd:// init's number (the highest any rank had, + 1): in group names from 1 on
_members = None   # the launch ranks of the last syncd:// init
_joined = False   # whether this process has been through a syncd:// init


def _live_ranks(why):
    """The launch ranks alive now, ascending (a lost rank adds no row), whether any rank was at
    an init and the highest generation any rank has seen."""
    mine = torch.tensor([[basics.client().rank, why, _generation]], dtype=torch.int64)
    rows = allgather(mine, name="syncd.c10d.members")
    return sorted(int(r) for r in rows[:, 0]), bool((rows[:, 1] == _AT_INIT).any()), int(rows[:, 2].max())


def ranks_changed():
    """syncd extension, called by every rank of the default group at the same point (a step
    boundary): whether the job's live ranks differ from the group's (a rank lost, a replacement
    waiting to join); if so, destroy_process_group() and init_process_group("syncd",
    init_method="syncd://") make the group again over them. The same answer on every rank."""
    members = _live_ranks(_AT_CHECK)[0]
    return members != (_members if _members is not None else list(range(basics.client().size)))


def _agree_on_members(timeout):
    """Every live rank's syncd:// init: the members and the new generation. The allgather fails on every survivor alike where it is the first collective
    without a lost rank (restore), and on a rank that acknowledged the job's membership a moment
    before its daemon told of a lost node: each tries again, until `timeout`."""
    global _joined
    client = basics.client()
    if not _joined and client.replaces_lost_rank():
        _joined = True
        try:
            client.acknowledge_membership()
            members, others_at_init, generation = _live_ranks(_JOINING)
            if others_at_init:
                return members, generation + 1
        except HorovodInternalError:  # its node is taken back first: the others fail and init again
            requests.wait_all()
    _joined = True
    deadline = time.monotonic() + timeout.total_seconds()
    while True:
        client.acknowledge_membership()
        try:
            members, _, generation = _live_ranks(_AT_INIT)
            return members, generation + 1
        except HorovodInternalError:
            requests.wait_all()
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


def _reachable_address():
    """An address of this host the job's other ranks reach: SYNCD_STORE_ADDR, else the one this
    host sends from towards MASTER_ADDR, else its name's."""
    if os.environ.get("SYNCD_STORE_ADDR"):
        return os.environ["SYNCD_STORE_ADDR"]
    master = os.environ.get("MASTER_ADDR")
    if master:
        try:
            family, kind, _, _, where = socket.getaddrinfo(master, 9, type=socket.SOCK_DGRAM)[0]
            with socket.socket(family, kind) as s:
                s.connect(where)
                return s.getsockname()[0]
        except OSError:
            pass
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def _syncd_rendezvous(url, timeout=dist.default_pg_timeout, **kwargs):
    """torch's rendezvous handler for syncd://: (store, rank, world size) of this process among the
    job's live ranks. The store is new each time, held by the new rank 0 on a port of its own."""
    global _generation, _members
    query = dict(parse_qsl(urlparse(url).query))
    client = _attach(int(query.get("rank", -1)), int(query.get("world_size", -1)))
    members, generation = _agree_on_members(timeout)
    basics.set_view(members)
    rank, size = basics.rank(), basics.size()
    refused = "; ".join(f"{key}={query[key]} was asked for, but the job's live ranks {members} make launch rank "
                        f"{client.rank} rank {rank} of {size}" for key, mine in (("rank", rank), ("world_size", size))
                        if key in query and int(query[key]) != mine)
    where, store = None, None
    if rank == 0:
        address = _reachable_address()
        store = dist.TCPStore(address, 0, size, True, timeout, wait_for_workers=False)
        where = (address, store.port)
    where = broadcast_object(where, root_rank=0, name="syncd.c10d.store")
    # Every rank learns of any rank's refusal, so none waits for the others in the store.
    refusals = [r for r in allgather_object(refused, name="syncd.c10d.refusals") if r]
    if refusals:
        raise ValueError("syncd:// rendezvous: " + "; ".join(refusals) + " (leave rank and world_size out)")
    if rank != 0:
        store = dist.TCPStore(where[0], where[1], size, False, timeout)
    _generation, _members = generation, members
    yield store, rank, size
    raise RuntimeError("syncd:// rendezvous: call init_process_group again for another")


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
    dist.register_rendezvous_handler("syncd", _syncd_rendezvous)
