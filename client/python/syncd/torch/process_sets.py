"""Process sets, as horovod.common.process_sets: collectives among a subset of the ranks.

    even = hvd.ProcessSet([0, 2])
    hvd.init(process_sets=[even])              # or, later, on every rank: hvd.add_process_set(even)
    if even.included():
        hvd.allreduce(x, process_set=even)      # averages over ranks 0 and 2 only

Adding and removing sets are collectives of every rank (all in the same order), as with
Horovod's HOROVOD_DYNAMIC_PROCESS_SETS (always on here). The daemons agree on each set's id; a
set whose ranks are all on one node never leaves that node's daemon, and disjoint sets run
concurrently.
"""
from syncd.errors import HorovodInternalError, SyncdError
from syncd.torch import basics


class ProcessSet:
    """A set of ranks (global ranks; any order, kept sorted). `process_set_id` is None until the
    set is added (hvd.init(process_sets=...) or hvd.add_process_set), and again once removed."""

    def __init__(self, ranks_or_comm):
        if not isinstance(ranks_or_comm, (list, tuple, range)):
            raise ValueError("syncd.torch: a ProcessSet is built from a list of ranks (MPI communicators are not supported)")
        self.ranks = sorted(int(r) for r in ranks_or_comm)
        self.process_set_id = None
        self.mpi_comm = None

    def _invalidate(self):
        self.process_set_id = None

    def size(self):
        """The number of ranks in the set, or None before it is added."""
        return None if self.process_set_id is None else len(self.ranks)

    def rank(self):
        """This process's rank within the set, or None when it is not in the set (or not added)."""
        if self.process_set_id is None or basics.rank() not in self.ranks:
            return None
        return self.ranks.index(basics.rank())

    def included(self):
        """Whether this process is in the set (None before it is added)."""
        if self.process_set_id is None:
            return None
        return basics.rank() in self.ranks

    def __str__(self):
        return "ProcessSet(process_set_id=%s, ranks=%s, mpi_comm=%s)" % (self.process_set_id, self.ranks, self.mpi_comm)

    __repr__ = __str__


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0

_sets = {}  # id -> ProcessSet, the added ones


def _on_init():
    global_process_set.ranks = list(range(basics.size()))
    global_process_set.process_set_id = 0


def _on_shutdown():
    for ps in _sets.values():
        ps._invalidate()
    _sets.clear()


def _on_reattach():
    # The new daemon has none of the old one's process sets.
    _on_shutdown()
    _on_init()


basics._init_hooks.append(_on_init)
basics._shutdown_hooks.append(_on_shutdown)
basics._reattach_hooks.append(_on_reattach)


def init(comm=None, process_sets=None):
    """hvd.init: attaches this process to its node's syncd (calling it again while attached does
    nothing), then adds `process_sets` (ProcessSet objects or lists of ranks), as every rank must."""
    basics.init(comm)
    for ps in process_sets or ():
        add_process_set(ps)


def add_process_set(process_set):
    """Adds a process set (a ProcessSet or a list of ranks) on every rank; returns the ProcessSet
    with its id. Every rank must call it, with the same ranks, in the same order."""
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    if ps.process_set_id is not None:
        raise ValueError("%s has already been added" % ps)
    try:
        ps.process_set_id = basics.client().add_process_set(ps.ranks)
    except SyncdError as e:
        raise HorovodInternalError(e) from e
    _sets[ps.process_set_id] = ps
    return ps


def remove_process_set(process_set):
    """Removes an added process set on every rank (all must call it). Returns True when removed,
    False when it was not an added set (the global set cannot be removed)."""
    if process_set.process_set_id in (None, 0) or process_set.process_set_id not in _sets:
        return False
    try:
        basics.client().remove_process_set(process_set.process_set_id)
    except SyncdError as e:
        raise HorovodInternalError(e) from e
    del _sets[process_set.process_set_id]
    process_set._invalidate()
    return True


def is_member(process_set, what="collective"):
    """Whether this rank is in `process_set` (None: the global set), which must have been added."""
    if process_set is None or process_set is global_process_set:
        return True
    if not isinstance(process_set, ProcessSet):
        raise ValueError("%s: process_set must be a ProcessSet, not %r" % (what, process_set))
    if process_set.process_set_id is None:
        raise ValueError("%s: %s has not been added (hvd.init(process_sets=...) or hvd.add_process_set)" %
                         (what, process_set))
    return basics.rank() in process_set.ranks


def set_id(process_set, what="collective"):
    """The daemon's id of `process_set` (None: the global set); this rank must be in it."""
    if not is_member(process_set, what):
        raise ValueError("%s: rank %d is not in %s" % (what, basics.rank(), process_set))
    return 0 if process_set is None else process_set.process_set_id


def set_size(process_set):
    return basics.size() if process_set is None else len(process_set.ranks)


def set_rank(process_set):
    return basics.rank() if process_set is None else process_set.ranks.index(basics.rank())
