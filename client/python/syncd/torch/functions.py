"""Model and object helpers, as horovod.torch.functions: broadcast_parameters,
broadcast_optimizer_state, broadcast_object, allgather_object."""
import io
import pickle

import torch

from syncd.torch import basics
from syncd.torch.gather_scatter import _allgather_rows_async
from syncd.torch.inplace_ops import broadcast_, broadcast_async_
from syncd.torch.process_sets import global_process_set
from syncd.torch.requests import _ps, synchronize


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Broadcasts parameters (a state_dict or model.named_parameters() / model.parameters()) from
    root_rank in place, so every rank starts from the same model."""
    if isinstance(params, dict):
        params = sorted(params.items())
    elif isinstance(params, list):
        params = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError("invalid params of type: %s" % type(params))
    handles = []
    for i, (name, p) in enumerate(params):
        if not torch.is_tensor(p):
            raise ValueError("broadcast_parameters: %s is a %s, not a tensor" % (name or "parameter %d" % i, type(p)))
        handles.append(broadcast_async_(p, root_rank, name, process_set=process_set))
    for h in handles:
        synchronize(h)


def broadcast_optimizer_state(optimizer, root_rank, model=None, process_set=global_process_set):
    """Makes every rank's optimizer state (hyperparameters of each param group and per-parameter
    state such as momentum buffers) equal to root_rank's.

    The root's state_dict is broadcast as one object and loaded on the other ranks, so state the
    other ranks have not created yet (before their first step) arrives too."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    state = broadcast_object(optimizer.state_dict() if basics.rank() == root_rank else None, root_rank,
                             name="optimizer_state", process_set=process_set)
    if basics.rank() != root_rank:
        optimizer.load_state_dict(state)


def _to_bytes(obj):
    buf = io.BytesIO()
    torch.save(obj, buf, pickle_protocol=pickle.HIGHEST_PROTOCOL)
    return torch.frombuffer(bytearray(buf.getbuffer()), dtype=torch.uint8)


def _from_bytes(data):
    # Any picklable object, as Horovod's: torch >= 2.6 loads weights only unless told otherwise.
    return torch.load(io.BytesIO(data.numpy().tobytes()), weights_only=False)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Serializes `obj` on root_rank and returns it on every rank (the root included)."""
    name = name if name is not None else type(obj).__name__
    if basics.rank() == root_rank:
        data = _to_bytes(obj)
        length = torch.tensor([data.numel()], dtype=torch.int64)
    else:
        length = torch.zeros(1, dtype=torch.int64)
    broadcast_(length, root_rank, name="%s.sz" % name, process_set=process_set)
    if basics.rank() != root_rank:
        data = torch.zeros(int(length.item()), dtype=torch.uint8)
    broadcast_(data, root_rank, name="%s.t" % name, process_set=process_set)
    return _from_bytes(data)


def allgather_object(obj, name=None, process_set=global_process_set):
    """Returns the list of every rank's `obj` (of the set), in rank order."""
    name = name if name is not None else type(obj).__name__
    data = _to_bytes(obj)
    # One allgather of the bytes; its rows per rank are the lengths.
    everything, lengths = synchronize(_allgather_rows_async(data, "allgather_object.%s" % name, _ps(process_set)))
    out, at = [], 0
    for length in lengths:
        if length == 0:  # a rank the job lost and went on without (--on-loss continue) adds nothing
            continue
        out.append(_from_bytes(everything[at:at + length]))
        at += length
    return out
