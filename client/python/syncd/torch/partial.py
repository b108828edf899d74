"""Partial allreduce (eager-SGD: Li et al., "Taming Unbalanced Training Workloads in Deep Learning
with Partial Collective Operations", PPoPP 2020). Not in horovod.torch: syncd's own.

A partial allreduce of a name is a persistent operation that runs in rounds without waiting for
every rank. `mode='solo'`: a round runs as soon as one rank (`quorum` ranks) arrives;
`mode='majority'`: a round runs when its initiator arrives, a rank drawn from the name and the
round number (the same on every rank), so on average half of the ranks are fresh. Ranks that are
not there contribute what they left in their daemon (their tensors no round took yet): nothing is
lost, a late contribution goes into the next round. A rank that arrives after its round ran gets
that round's result at once. `op=Average` divides by the number of tensors the round summed.

The result tensor carries `partial_info`: PartialInfo(round, nap, initiator, fresh), where nap is
the number of ranks whose contribution was fresh in that round.
"""
import collections

import torch

from syncd.torch import basics
from syncd.torch.basics import Average, Sum, client, dtype_code
from syncd.torch.inplace_ops import _stage
from syncd.torch.process_sets import global_process_set, set_id
from syncd.torch.requests import _name, _ps, _register, _Request, _submitting, synchronize

PartialInfo = collections.namedtuple("PartialInfo", "round nap initiator fresh")

_MODES = {"solo": 1, "majority": 2}


def _check(tensor, mode, quorum, op, ps):
    if mode not in _MODES:
        raise ValueError("partial allreduce mode must be 'solo' or 'majority', not %r" % (mode,))
    op = Average if op is None else op
    if op not in (Sum, Average):
        raise ValueError("partial allreduce takes op=Average or op=Sum")
    size = ps.size() if ps is not None else basics.size()
    if quorum is not None and (not isinstance(quorum, int) or quorum < 1 or quorum > size):
        raise ValueError("partial allreduce quorum must be an int from 1 to %d (the set's size), not %r" % (size, quorum))
    if tensor.dtype == torch.bool:
        raise ValueError("partial allreduce does not take bool tensors")
    return op


def _with_info(output):
    def result(parts):
        output.partial_info = PartialInfo(*client().partial_info(parts[0].handle))
        return output
    return result


def _partial_async(tensor, output, name, mode, quorum, op, process_set):
    ps = _ps(process_set)
    op = _check(tensor, mode, quorum, op, ps)
    name = _name("partial_allreduce", name, ps)
    source = tensor.detach()
    if source.is_cuda:  # the host path runs partial rounds: staged through host memory
        source = source.cpu()
    req = _Request(_with_info(output), keep=tensor)
    with _submitting(req, name, ps) as part:
        code = dtype_code(source, "tensor '%s'" % name)
        addr = _stage(part, source, output)
        part.handle = client().partial_allreduce_async(name, addr, code, list(source.shape), op, _MODES[mode],
                                                       int(quorum or 0), set_id(ps))
    return _register(req)


def partial_allreduce_async(tensor, name=None, mode="solo", quorum=None, op=None, process_set=global_process_set):
    """Starts a partial allreduce of `tensor` into a new tensor; synchronize() returns it, with
    `partial_info` set."""
    output = torch.empty_like(tensor, memory_format=torch.contiguous_format)
    return _partial_async(tensor, output, name, mode, quorum, op, process_set)


def partial_allreduce_async_(tensor, name=None, mode="solo", quorum=None, op=None, process_set=global_process_set):
    """Starts an in-place partial allreduce of `tensor` (no copy when it lives in the arena)."""
    return _partial_async(tensor, tensor, name, mode, quorum, op, process_set)


def partial_allreduce(tensor, name=None, mode="solo", quorum=None, op=None, process_set=global_process_set):
    """Partial allreduce of `tensor`: returns this round's result (a new tensor) with
    `partial_info` = PartialInfo(round, nap, initiator, fresh). Not differentiable."""
    with torch.no_grad():
        return synchronize(partial_allreduce_async(tensor, name, mode, quorum, op, process_set))
