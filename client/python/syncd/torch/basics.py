"""Process-wide state of syncd.torch: the attached client, identity queries, dtype and op tables.

One client per process, as in Horovod: init() attaches to the node's syncd (the environment set
by syncrun, the Slurm prolog or srun says where), shutdown() detaches, and init() may follow again.
"""
import atexit
import os
import time
import weakref

import torch

from syncd import _client
from syncd.errors import SyncdError

# Reduction ops, named as in horovod.torch.
Sum = _client.SUM
Average = _client.AVERAGE
Min = _client.MIN
Max = _client.MAX
Product = _client.PRODUCT
Adasum = _client.ADASUM  # the daemons' (float host tensors, a power of two of ranks)

_DTYPES = {
    torch.uint8: _client.UINT8,
    torch.int8: _client.INT8,
    torch.int32: _client.INT32,
    torch.int64: _client.INT64,
    torch.float16: _client.FLOAT16,
    torch.bfloat16: _client.BFLOAT16,
    torch.float32: _client.FLOAT32,
    torch.float64: _client.FLOAT64,
    torch.int16: _client.INT16,
    torch.bool: _client.BOOL,
}

_client_obj = None
# Objects holding views into the arena (DistributedOptimizer's gradient buffers): at shutdown
# they move their tensors out before the arena is unmapped.
_arena_owners = weakref.WeakSet()
_shutdown_hooks = []
_init_hooks = []
_reattach_hooks = []
# The elastic view (syncd.torch.elastic): once a job that lost ranks has reset, the survivors are
# numbered 0..n-1 in their launch order, as Horovod elastic renumbers them: rank(), size() and the
# roots this module's calls take follow it. None: the launch numbering.
_view = None
_view_rank = 0


def _not_initialized():
    return ValueError("syncd has not been initialized; use hvd.init().")


def client():
    if _client_obj is None:
        raise _not_initialized()
    return _client_obj


def init(comm=None):
    """Attaches this process to its node's syncd (calling it again while attached does nothing).
    hvd.init (syncd.torch.process_sets.init) then adds the process sets it is given."""
    global _client_obj
    if comm is not None:
        raise ValueError("syncd.torch.init: MPI communicators are not supported; ranks come from syncrun/srun")
    if _client_obj is None:
        _client_obj = _client.Client()
        _start_without_vacant_ranks()
        for hook in list(_init_hooks):
            hook()


def _vacant_ranks():
    """SYNCD_VACANT_RANKS (syncrun --max-np sets it, as the daemons' --vacant-ranks): the job's
    slots none held at launch, as a list like "1,3-4"."""
    text = os.environ.get("SYNCD_VACANT_RANKS", "").strip()
    ranks = set()
    for entry in filter(None, text.split(",")):
        lo, _, hi = entry.partition("-")
        try:
            ranks.update(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            raise ValueError("SYNCD_VACANT_RANKS=%r: expected ranks like 1,3-4" % text) from None
    return ranks


def _start_without_vacant_ranks():
    # A job started with vacant slots (syncrun --max-np): its ranks are numbered 0..n-1 among those
    # started, as Horovod elastic numbers the ranks it starts. A rank that starts in a vacant slot
    # later is numbered when it joins the others (hvd.elastic.run).
    vacant = _vacant_ranks()
    c = _client_obj
    if vacant and c.rank not in vacant and not c.replaces_lost_rank():
        set_view([r for r in range(c.size) if r not in vacant])


def shutdown():
    """Detaches from syncd. Requests still in flight are abandoned; tensors that lived in the
    shared arena (gradient buffers) are moved to ordinary memory first."""
    global _client_obj
    if _client_obj is None:
        return
    for hook in list(_shutdown_hooks):
        hook()
    for owner in list(_arena_owners):
        owner.release()
    c, _client_obj = _client_obj, None
    set_view(None)
    c.close()


@atexit.register
def _leave_at_exit():
    # As Horovod shuts down at exit: a script that ends without hvd.shutdown() (or with a
    # torch.distributed group or DDP still holding this process's client, which then outlives the
    # interpreter) says goodbye, so the daemon sees a rank that left, not one that died and aborts
    # the job for the others. The mappings stay: objects torn down after this may point into them.
    if _client_obj is not None:
        _client_obj.leave()


def reattach(wait_s):
    """syncd extension: this process's daemon is gone (SyncdError, status 'DAEMON_LOST') and
    another was started in its place (systemd's Restart=, an upgrade, syncrun --restart-daemons):
    attaches to it, handing it this process's shared segment, so tensors in the arena
    (DistributedOptimizer's gradient buffers) stay where they are, with their contents. Requests
    in flight are dropped and process sets must be added again; the daemon takes the rank back as
    a replacement (hvd.elastic.run rejoins the others). Tries for up to `wait_s` seconds; past
    them raises SyncdError naming the rank and the run directory."""
    c = client()
    deadline = time.monotonic() + wait_s
    while True:
        left = deadline - time.monotonic()
        try:
            c.reattach(int(min(max(left, 0.001), 1.0) * 1000))
            break
        except SyncdError as e:
            if time.monotonic() >= deadline:
                raise SyncdError("rank %d: its node's syncd (%s) is gone and none took it back within %g s: %s" %
                                 (c.rank, os.environ.get("SYNCD_RUN_DIR", "?"), wait_s, e), e.status) from e
            time.sleep(0.02)
    set_view(None)
    for hook in list(_reattach_hooks):
        hook()


def start_timeline(file_path, mark_cycles=False):
    """Horovod's timeline: node 0's daemon writes every rank's and every daemon's events to
    `file_path` (Chrome trace JSON; open it in Perfetto or chrome://tracing) until stop_timeline()
    or the job's end. Any rank may call it; calling it again with the same file does nothing.
    Coordination cycles that run tensors are always marked (`mark_cycles` is accepted for Horovod's
    signature)."""
    client().start_timeline(os.path.abspath(file_path))


def stop_timeline():
    """Stops the timeline; node 0's daemon finishes the file (every node's last events) within 2 s."""
    client().stop_timeline()


def is_initialized():
    return _client_obj is not None


def rank():
    return client().rank if _view is None else _view_rank


def size():
    return client().size if _view is None else len(_view)


def set_view(launch_ranks):
    """Numbers the ranks `launch_ranks` (launch ranks, ascending, this one among them) 0..n-1;
    None (or every rank) returns to the launch numbering."""
    global _view, _view_rank
    if launch_ranks is None or (_client_obj is not None and list(launch_ranks) == list(range(_client_obj.size))):
        _view = None
        return
    _view = list(launch_ranks)
    _view_rank = _view.index(client().rank)


def view():
    """The launch ranks rank() numbers 0..n-1 since an elastic reset (a list), or None while it
    numbers them as launched."""
    return _view


def launch_rank(r):
    """The launch rank of rank `r` as rank() numbers ranks (a root, say)."""
    return _view[r] if _view is not None and 0 <= r < len(_view) else r


def local_rank():
    return client().local_rank


def local_size():
    return client().local_size


def cross_rank():
    return client().cross_rank


def cross_size():
    return client().cross_size


def is_homogeneous():
    return True


def coord_mode():
    """The daemon's --coord mode (syncd extension): negotiate, gs, nbcs or topo."""
    return client().coord_mode


def _false():
    return False


mpi_threads_supported = mpi_enabled = mpi_built = gloo_enabled = gloo_built = _false
nccl_built = ddl_built = ccl_built = rocm_built = _false


def cuda_built():
    """Whether CUDA tensors are accepted: syncd reduces them with NCCL inside the daemon."""
    return True


def dtype_code(tensor, what):
    code = _DTYPES.get(tensor.dtype)
    if code is None:
        raise ValueError("%s: tensor type %s is not supported (supported: %s)" %
                         (what, tensor.type(), ", ".join(str(d) for d in _DTYPES)))
    if tensor.device.type not in ("cpu", "cuda"):
        raise ValueError("%s: tensor is on %s; syncd reduces host and CUDA tensors" % (what, tensor.device))
    return code


def arena_tensor(numel, dtype):
    """A tensor of `numel` elements in the client's shared arena, and its address. The caller
    frees it with client().free(addr) once no view of it is used again."""
    c = client()
    nbytes = numel * torch.tensor([], dtype=dtype).element_size()
    addr = c.alloc(max(nbytes, 1))
    if nbytes == 0:
        return addr, torch.empty(0, dtype=dtype)
    return addr, torch.frombuffer(c.view(addr, nbytes), dtype=dtype, count=numel)
