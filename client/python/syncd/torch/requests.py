"""The requests behind syncd.torch's handles: staging into the client's arena, submission that
tells the other ranks when this rank cannot take part, and waiting (poll, synchronize).

A tensor this rank refuses (an unsupported type, say) still takes part under its name: the other
ranks' requests of that name fail naming this rank, instead of waiting for it, and unnamed calls
stay in step.
"""
import contextlib
import itertools

import torch

from syncd.errors import HorovodInternalError, SyncdError
from syncd.torch import basics
from syncd.torch.basics import client
from syncd.torch.process_sets import global_process_set, set_id


_handles = {}  # handle -> _Request, until synchronize()
_handle_ids = itertools.count(1)
_noname = {}  # process set id -> counter of unnamed calls (every member counts the same calls)


def _name(prefix, name, ps=None):
    if name is not None:
        return "%s.%s" % (prefix, name)
    counter = _noname.setdefault(set_id(ps), itertools.count(1))
    return "%s.noname.%d" % (prefix, next(counter))


def _ps(process_set):
    """None for the global set, else the (added) ProcessSet this rank is in."""
    if process_set is None or process_set is global_process_set:
        return None
    set_id(process_set)  # raises ValueError unless added and including this rank
    return process_set


_refused = []  # handles of names this rank refused (syncd_fail_async), reaped as they complete


def _forget_handles():
    # At shutdown the client abandons in-flight requests; their handles mean nothing after, and
    # the next job's process sets are new ones.
    _handles.clear()
    _refused.clear()
    for pid in [p for p in _noname if p != 0]:
        del _noname[pid]


def _refuse(names, error, ps=None):
    """This rank cannot take part in `names`: every rank's request of each fails with `error`."""
    c = client()
    for name in names:
        try:
            _refused.append(c.fail_async(name, str(error), set_id(ps)))
        except (SyncdError, ValueError):
            pass  # the daemon is gone, or the name is in flight already: nobody waits for this one
    _reap_refused()


def _reap_refused():
    c = client()
    for h in list(_refused):
        try:
            done = c.poll(h)
        except SyncdError:
            done = True  # completed with the (expected) error
        if done:
            _refused.remove(h)


def _drop_old_daemons_handles():
    # After basics.reattach: what the old daemon held has failed (DAEMON_LOST); waiting for each
    # returns at once and lets the client reuse its slots.
    c = client()
    for req in list(_handles.values()):
        for part in req.parts:
            try:
                c.wait(part.handle)
            except SyncdError:
                pass
    for h in _refused:
        try:
            c.wait(h)
        except SyncdError:
            pass
    _forget_handles()


basics._shutdown_hooks.append(_forget_handles)
basics._reattach_hooks.append(_drop_old_daemons_handles)


class _Part:
    """One tensor of a request: where the daemon works and where the result goes. `fetch`, when
    set, builds the output at completion (allgather, alltoall and reducescatter results)."""
    __slots__ = ("handle", "done", "source", "output", "block", "staging", "fetch", "placed", "rows")

    def __init__(self):
        self.handle = None
        self.done = False
        self.output = None
        self.block = None
        self.staging = None
        self.fetch = None
        self.placed = False  # the daemon places its result in the result area (released at the end)
        self.rows = None  # allgather, alltoall: the rows per rank the result came with


class _Request:
    __slots__ = ("parts", "result", "error", "keep")

    def __init__(self, result, keep=None):
        self.parts = []
        self.result = result  # returned by synchronize: a tensor, or a list for grouped calls
        self.error = None
        self.keep = keep  # inputs kept alive while in flight

    def _finish(self, part, wait):
        try:
            done = client().wait(part.handle) if wait else client().poll(part.handle)
        except SyncdError as e:
            done = True
            if self.error is None:
                self.error = e
        if done:
            part.done = True
        return done

    def poll(self):
        return all(p.done or self._finish(p, wait=False) for p in self.parts)

    def wait(self):
        for p in self.parts:
            if not p.done:
                self._finish(p, wait=True)
        c = client()
        try:
            if self.error is None:
                with torch.no_grad():
                    for p in self.parts:
                        if p.fetch is not None:
                            p.output = p.fetch()
                        elif p.staging is not None:
                            p.output.copy_(p.staging.view(p.output.shape))
        finally:
            for p in self.parts:
                if p.placed:
                    c.release(p.handle)
                    p.placed = False
                if p.block is not None:
                    c.free(p.block)
                    p.block = None
        if self.error is not None:
            raise HorovodInternalError(self.error)
        return self.result(self.parts) if callable(self.result) else self.result


@contextlib.contextmanager
def _submitting(req, name, ps=None):
    """A new part of `req` for the tensor `name`. If anything fails before it is submitted, the
    other ranks learn it instead of waiting (not for a duplicate name) and its staging is freed."""
    if _refused:
        _reap_refused()
    part = _Part()
    try:
        yield part
    except BaseException as e:
        if part.block is not None:
            client().free(part.block)
        _refuse([name], e, ps)
        raise
    req.parts.append(part)


def _register(req):
    handle = next(_handle_ids)
    _handles[handle] = req
    return handle


def _abandon(req):
    # A later part of a grouped call failed to submit: the earlier ones are in flight and must
    # complete before their staging blocks can be reused.
    try:
        req.wait()
    except HorovodInternalError:
        pass


def poll(handle):
    """True when the request behind `handle` has completed (synchronize() then returns at once)."""
    req = _handles.get(handle)
    if req is None:
        raise ValueError("Handle %s was not created or has been cleared." % (handle,))
    return req.poll()


def synchronize(handle):
    """Waits for the request and returns its output; raises HorovodInternalError if it failed."""
    req = _handles.pop(handle, None)
    if req is None:
        return None
    return req.wait()


def wait_all():
    """Waits for every request in flight, dropping results and errors (hvd.elastic, before a
    rollback: the names are free and the buffers untouched afterwards)."""
    for handle in list(_handles):
        try:
            synchronize(handle)
        except HorovodInternalError:
            pass
