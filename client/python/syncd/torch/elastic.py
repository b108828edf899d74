"""hvd.elastic: Horovod's elastic API over syncd (`syncrun --elastic`, i.e. `--on-loss restore`,
or `--on-loss continue`; or every syncd of the job started with that `--on-loss`).

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            ...
            state.commit()

    state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0)
    state.register_reset_callbacks([on_state_reset])
    train(state)

How a loss reaches the script. The daemons go on without a lost rank (it adds nothing; Average
divides by the tensors summed).
- `restore` (Horovod's behaviour): the first collective that goes without it fails on every
  survivor alike (once per stream of work: a TOPO plan's groups and the negotiated ones each fail
  once), so the survivor's pending call raises HorovodInternalError; `run` waits for its other
  calls in flight, restores the last commit, renumbers the survivors 0..n-1 in their launch order
  (hvd.rank(), hvd.size() and the roots of broadcasts follow), calls the reset callbacks, syncs
  the state from the new rank 0 and calls the function again.
- `continue`: no call fails and nothing is rolled back. The next `state.commit()` or
  `state.check_host_updates()` learns who is left (one allgather of the ranks, the same answer on
  every survivor) and raises HostsUpdatedInterrupt on every survivor at the same point; `run`
  renumbers, calls the reset callbacks and goes on from the state as it is (nothing was lost, so
  no sync, as Horovod skips it when hosts were only removed).
HorovodInternalError for any other reason (a mismatch, a job under --on-loss fail) restores the
last commit as well.

A lost node: what was in flight fails on every rank left (HorovodInternalError); `run` rolls back,
acknowledges the job's new membership (the daemons made the global set afresh without the node;
calls fail until then) and renumbers, as above. A rank whose own daemon is gone cannot go on: the
SyncdError (DAEMON_LOST) leaves `run`, unless SYNCD_REATTACH_S (seconds; `syncrun
--restart-daemons` sets it) gives the daemon time to come back (systemd's Restart=, an upgrade):
`run` then attaches to the new daemon as soon as it serves the job (basics.reattach, up to that
many seconds: it hands the daemon this process's segment, so gradient buffers in the arena stay
where they are; calls in flight are dropped) and goes on as a replacement does (below), from the
state rank 0 has. Process sets added before are gone with the old daemon.

A replacement (`syncrun --elastic --respawn`: the same rank started again on the same node): its
first call is the members' allgather, which the others' next commit takes part in; they see it
and raise HostsUpdatedInterrupt (not only removed: sync), it resets with them, and every rank gets
the state from rank 0. Where every rank of its node was lost (a 4 x 1 job), the daemons take the
node back into the job's collectives first: what was in flight fails on every rank
(HorovodInternalError, under either policy), they roll back to the last commit, acknowledge the
new membership and reset with the replacement, whose calls were refused until then.

New ranks beyond the launch's (syncrun --max-np with --host-discovery-script): the job starts
with vacant slots, which the ranks started do not count (basics numbers them 0..n-1 at init); a
rank started in a vacant slot joins as a replacement does.

In the renumbered view roots, alltoall's splits (sent and received) and reducescatter's shares
follow rank() and size() (gather_scatter.py translates them to the job's global set, which a
lost rank's daemon stands in for). Not yet: new nodes joining, process sets in the renumbered
view (they take launch ranks).
"""
import copy
import functools
import math
import os
import random

import torch

from syncd.torch import basics, requests
from syncd.torch.functions import allgather_object, broadcast_object, broadcast_optimizer_state, broadcast_parameters
from syncd.torch.gather_scatter import allgather
from syncd.errors import SyncdError
from syncd.torch.requests import HorovodInternalError


class HostsUpdatedInterrupt(RuntimeError):
    """The job's ranks changed; raised on every rank at the same commit. `skip_sync`: only ranks
    were removed, so the survivors' state is already the same everywhere."""

    def __init__(self, skip_sync=False):
        super().__init__("the job's ranks changed")
        self.skip_sync = skip_sync


# Why a rank takes part in the members' allgather: at a commit (check_host_updates), while it
# resets, or as a replacement's first call. Every rank calls it at the same points, but a
# replacement's first call meets whichever comes next: the others' commit (they then see it and
# reset, with it) or the others' reset (they were recovering from a failure: it resets with them
# there and then).
_AT_COMMIT, _RESETTING, _JOINING = 0, 1, 2


def _members(why=_AT_COMMIT):
    """The launch ranks alive now, ascending (every rank's own, allgathered: a lost rank adds no
    row), and whether any rank called it while resetting."""
    mine = torch.tensor([[basics.client().rank, why]], dtype=torch.int64)
    rows = allgather(mine, name="syncd.elastic.members")
    return sorted(int(r) for r in rows[:, 0]), bool((rows[:, 1] == _RESETTING).any())


class State:
    """What training must keep across a change of ranks: save() on commit, restore() after a
    failure, sync() from rank 0, reset() when the ranks changed."""

    def __init__(self):
        self._reset_callbacks = []
        self._members = None

    def register_reset_callbacks(self, callbacks):
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp, update_res):
        """Horovod's driver notification; syncd's daemons need none (check_host_updates asks them)."""

    def commit(self):
        """Saves the state, then checks whether ranks were lost (HostsUpdatedInterrupt)."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        members, _ = _members()
        if self._members is None:
            self._members = members
        if members != self._members:
            removed_only = set(members) <= set(self._members)
            self._members = members
            raise HostsUpdatedInterrupt(skip_sync=removed_only)

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self):
        raise NotImplementedError()

    def reset(self):
        pass


class ObjectState(State):
    """Plain Python values (kwargs), kept as attributes: saved by deep copy, synced by broadcast
    from rank 0."""

    def __init__(self, bcast_object=broadcast_object, get_rank=basics.rank, **kwargs):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._saved_state = kwargs
        self._set_attrs()
        super().__init__()

    def save(self):
        new_state = {}
        for attr in self._saved_state:
            new_state[attr] = copy.deepcopy(getattr(self, attr))
        self._saved_state = new_state

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state, root_rank=0, name="syncd.elastic.object_state")
            self._set_attrs()

    def _set_attrs(self):
        for attr, value in self._saved_state.items():
            setattr(self, attr, copy.deepcopy(value))


class _Handler:
    """A value with a state_dict (a model, an optimizer, an ElasticSampler): saved by deep copy of
    it, restored by loading it back; sync() and reset() are the value's own."""

    def __init__(self, value):
        self.value = value
        self._saved = copy.deepcopy(value.state_dict())

    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)

    def sync(self):
        pass

    def reset(self):
        pass


class _ModelHandler(_Handler):
    def sync(self):
        broadcast_parameters(self.value.state_dict(), root_rank=0)


class _OptimizerHandler(_Handler):
    def sync(self):
        broadcast_optimizer_state(self.value, root_rank=0)


class _SamplerHandler(_Handler):
    def _processed_anywhere(self):
        processed = set()
        for s in allgather_object(self.value.state_dict(), name="syncd.elastic.sampler"):
            processed |= set(s["processed_indices"])
        return sorted(processed)

    def sync(self):
        # What any rank has processed is processed: the union, at rank 0's epoch.
        processed = self._processed_anywhere()
        epoch = broadcast_object(self.value.epoch, root_rank=0, name="syncd.elastic.sampler_epoch")
        self.value.load_state_dict({"epoch": epoch, "processed_indices": processed})

    def reset(self):
        # Every survivor resets at the same point: each re-shards what no rank has processed yet
        # over the new numbering (each rank recorded only its own shard).
        self.value.load_state_dict({"epoch": self.value.epoch, "processed_indices": self._processed_anywhere()})


class TorchState(ObjectState):
    """Horovod's TorchState: a model, an optimizer, ElasticSamplers and any other values
    (`state.epoch`, `state.batch`), each saved on commit, restored after a failure and synced from
    rank 0."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        handlers, values = {}, {}
        if model is not None:
            handlers["model"] = _ModelHandler(model)
        if optimizer is not None:
            handlers["optimizer"] = _OptimizerHandler(optimizer)
        for k, v in kwargs.items():
            if isinstance(v, ElasticSampler):
                handlers[k] = _SamplerHandler(v)
            else:
                values[k] = v
        self._handlers = handlers
        super().__init__(**values)

    def __getattr__(self, name):
        handlers = self.__dict__.get("_handlers", {})
        if name in handlers:
            return handlers[name].value
        raise AttributeError(name)

    def save(self):
        for h in self._handlers.values():
            h.save()
        super().save()

    def restore(self):
        for h in self._handlers.values():
            h.restore()
        super().restore()

    def sync(self):
        for h in self._handlers.values():
            h.sync()
        super().sync()

    def reset(self):
        for h in self._handlers.values():
            h.reset()


class ElasticSampler(torch.utils.data.Sampler):
    """Horovod's ElasticSampler: shards a dataset over hvd.size() ranks and, after a change of
    ranks, re-shards what this epoch has not processed yet (record_batch / record_indices say what
    was)."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_indices = set()
        self.num_replicas = 0
        self.rank = 0
        self.remaining_indices = []
        self.num_samples = 0
        self.total_size = 0
        self.indices = []
        self.reset()

    def set_epoch(self, epoch):
        self.epoch = epoch
        self.processed_indices = set()
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        self.record_indices(self.get_indices(batch_idx, batch_size))

    def record_indices(self, indices):
        self.processed_indices.update(indices)

    def get_indices(self, batch_idx, batch_size):
        start = batch_idx * batch_size
        return self.indices[start:min(start + batch_size, len(self.indices))]

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_indices = set(state_dict["processed_indices"])
        self.reset()

    def state_dict(self):
        return {"epoch": self.epoch, "processed_indices": sorted(self.processed_indices)}

    def reset(self):
        self.num_replicas = basics.size()
        self.rank = basics.rank()
        self.remaining_indices = [i for i in range(len(self.dataset)) if i not in self.processed_indices]
        self.num_samples = int(math.ceil(len(self.remaining_indices) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas
        self.indices = self._shard()

    def _shard(self):
        indices = list(self.remaining_indices)
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(indices)
        if indices:
            indices += indices[:self.total_size - len(indices)]  # pad to a multiple of the ranks
        return indices[self.rank:self.total_size:self.num_replicas]

    def __iter__(self):
        return iter(self.indices)

    def __len__(self):
        return self.num_samples


def _reset(state, members=None):
    """After a change of ranks: number the survivors 0..n-1 (the daemons went on without the lost
    ones; nothing to detach or attach again). After a lost node, the rank's requests fail until it
    acknowledges the job's new membership (its calls in flight are done by now); a rank whose own
    daemon is gone raises here (SyncdError, DAEMON_LOST): `run` attaches again or lets it leave.
    `members`: a replacement's first call met the others' reset and returned them. Returns whether
    a rank is new among the members (a replacement): every rank then syncs from rank 0."""
    if members is None:
        basics.client().acknowledge_membership()
        members, _ = _members(_RESETTING)
    added = state._members is None or not set(members) <= set(state._members)
    state._members = members
    basics.set_view(members)
    return added


def _reattach_seconds():
    """SYNCD_REATTACH_S: how long a rank whose daemon is gone waits for it to come back (0: not)."""
    value = os.environ.get("SYNCD_REATTACH_S", "0")
    try:
        return max(float(value), 0.0)
    except ValueError:
        raise ValueError("SYNCD_REATTACH_S=%r: not a number of seconds" % value) from None


def _daemon_lost(error):
    return getattr(error, "status", None) == "DAEMON_LOST"


def _join_as_replacement():
    """A replacement's first call: the members' allgather, which the others' next commit takes
    part in (they see the replacement and reset: it resets with them), or their reset when they
    are recovering from a failure (it has reset with them: the members are returned). On a node
    whose every rank was lost it is refused until the daemons have taken the node back (which
    fails what the others had in flight: they roll back and reset, it with them)."""
    try:
        members, others_resetting = _members(_JOINING)
    except HorovodInternalError:
        requests.wait_all()
        return None
    return members if others_resetting else None


def run(func):
    """Horovod's hvd.elastic.run: calls func(state, ...) until it returns; a change of ranks
    (HostsUpdatedInterrupt) resets and goes on, a failed collective (HorovodInternalError)
    restores the last commit, resets and syncs from rank 0 first. A failure while resetting or
    syncing (another loss) starts the recovery again. With SYNCD_REATTACH_S, a rank whose daemon is
    gone attaches to the one started in its place and rejoins as a replacement."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        skip_sync, reset, reattach = False, False, False
        reattach_s = _reattach_seconds()
        # A replacement (syncrun --respawn, or this rank attached again to its restarted daemon):
        # the others learn of it at their next commit and reset; it resets with them and gets the
        # state from rank 0.
        join = basics.client().replaces_lost_rank()
        while True:
            if reattach:
                basics.reattach(reattach_s)  # none came back in time: the SyncdError leaves run
                reattach, join = False, True
            try:
                members = None
                if join:
                    join, reset, skip_sync = False, True, False
                    members = _join_as_replacement()
                if reset:
                    # Someone new among the members (a replacement): every rank syncs from rank 0.
                    added = _reset(state, members)
                    skip_sync = skip_sync and not added
                    state.on_reset()
                    reset = False
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except SyncdError as e:
                if _daemon_lost(e) and reattach_s > 0:
                    state.restore()
                    skip_sync, reset, reattach = False, False, True
                    continue
                if not isinstance(e, HorovodInternalError):
                    raise
                # The calls still in flight complete among the survivors first: their names are
                # free again, their buffers no longer written.
                requests.wait_all()
                state.restore()
                skip_sync, reset = False, True
            except HostsUpdatedInterrupt as e:
                skip_sync, reset = e.skip_sync, True

    return wrapper
