"""allgather, alltoall and reducescatter (the result's shape differs from the input's) and sparse
allreduce, with horovod.torch's names, defaults, semantics and gradients.

The input is copied into an arena block at submission (CUDA tensors through host memory: these
kinds have no GPU path yet). An allgather's or alltoall's result, whose size only the daemon
knows, lies in the client's result area and is copied out at completion; a reducescatter's is
the first rows of the staged input.
"""
import torch

from syncd.errors import NotSupportedError
from syncd.torch import basics
from syncd.torch.basics import Adasum, Average, Sum, client, dtype_code
from syncd.torch.compression import Compression
from syncd.torch.inplace_ops import allreduce, grouped_allreduce
from syncd.torch.process_sets import global_process_set, set_id, set_rank, set_size
from syncd.torch.requests import _abandon, _name, _ps, _refuse, _register, _Request, _submitting, synchronize

_COMPRESSION_NONE = 1  # syncd_compression: a reducescatter's sum is exact, as the daemons' own is


def _stage_input(part, tensor):
    """Arena memory holding a copy of `tensor`'s data, for kinds whose result is not the input
    (CUDA tensors go through host memory: these kinds have no GPU path yet)."""
    if tensor.is_cuda:
        tensor = tensor.detach().cpu()
    nbytes = tensor.numel() * tensor.element_size()
    part.block, part.staging = basics.arena_tensor(tensor.numel(), tensor.dtype)
    with torch.no_grad():
        part.staging.copy_(tensor.reshape(-1))
    return part.block if nbytes > 0 else 0


def _placed(part, like):
    """The daemon's result of an allgather or alltoall (a copy, on `like`'s device) and the rows
    per rank; the block goes back to the daemon when the request is finished."""
    view, part.rows = client().result(part.handle)
    out = torch.frombuffer(view, dtype=like.dtype).clone() if len(view) else torch.empty(0, dtype=like.dtype)
    return out.view((sum(part.rows),) + tuple(like.shape[1:])).to(like.device)


def _set_splits(name, splits, rows, live):
    """alltoall's splits as rank() numbers the ranks since an elastic reset (`live`: their launch
    ranks) -> one per rank of the job's global set, as the daemons take them (none to a rank lost,
    which its node's daemon stands in for), and the positions of the live ranks in that set."""
    n = len(live)
    if splits is None:
        if rows % n:
            raise ValueError("tensor '%s': alltoall without splits divides the first dimension equally, but %d rows "
                             "do not divide among %d ranks; pass splits" % (name, rows, n))
        splits = [rows // n] * n
    if len(splits) != n:
        raise ValueError("tensor '%s': alltoall has %d splits for %d ranks" % (name, len(splits), n))
    members = client().job_set_ranks()
    at = [members.index(r) for r in live]
    per_member = [0] * len(members)
    for i, s in zip(at, splits):
        per_member[i] = s
    return per_member, at


def _submit_renumbered(part, kind, name, tensor, addr, code, op, prescale, postscale, splits, live):
    """alltoall and reducescatter of the global set since an elastic reset: the daemons run them
    over every rank of the job's global set, lost ranks included (their daemons stand in), so what
    goes per rank is translated. A reducescatter is an allreduce of which this rank keeps its
    share, shared among the live ranks as hvd.size() and hvd.rank() number them."""
    c = client()
    shape = list(tensor.shape)
    if kind == "alltoall":
        per_member, at = _set_splits(name, splits, tensor.shape[0], live)
        part.handle = c.alltoall_async(name, addr, code, shape, per_member)
        part.placed = True

        def fetch():
            out = _placed(part, tensor)  # stand-ins send no rows: the set's order is the live ranks'
            part.rows = [part.rows[i] for i in at]
            return out
        part.fetch = fetch
        return
    part.handle = c.allreduce_async(name, addr, code, shape, op, float(prescale), float(postscale),
                                    compression=_COMPRESSION_NONE)
    n, me = len(live), basics.rank()
    first = sum(c.reducescatter_rows(tensor.shape[0], n, q) for q in range(me))
    rows = c.reducescatter_rows(tensor.shape[0], n, me)
    row = tensor[0].numel() if tensor.shape[0] > 0 else 0
    part.fetch = lambda: (part.staging[first * row:(first + rows) * row].clone()
                          .view((rows,) + tuple(tensor.shape[1:])).to(tensor.device))


def _submit_kind(req, kind, name, tensor, op=Average, prescale=1.0, postscale=1.0, splits=None, ps=None):
    """allgather, alltoall, reducescatter: the input is staged, the output built at completion."""
    c = client()
    pid = set_id(ps)
    live = basics.view() if ps is None and kind != "allgather" else None
    with _submitting(req, name, ps) as part:
        code = dtype_code(tensor, "tensor '%s'" % name)
        if tensor.dim() == 0:
            raise ValueError("tensor '%s': %s needs a tensor of at least one dimension" % (name, kind))
        addr = _stage_input(part, tensor)
        shape = list(tensor.shape)
        if live is not None:
            _submit_renumbered(part, kind, name, tensor, addr, code, op, prescale, postscale, splits, live)
        elif kind == "allgather":
            part.handle = c.allgather_async(name, addr, code, shape, process_set=pid)
            part.placed = True
            part.fetch = lambda: _placed(part, tensor)
        elif kind == "alltoall":
            part.handle = c.alltoall_async(name, addr, code, shape, splits, process_set=pid)
            part.placed = True
            part.fetch = lambda: _placed(part, tensor)
        else:
            part.handle = c.reducescatter_async(name, addr, code, shape, op, float(prescale), float(postscale),
                                                process_set=pid)
            rows = c.reducescatter_rows(tensor.shape[0], set_size(ps), set_rank(ps))
            row = tensor[0].numel() if tensor.shape[0] > 0 else 0
            part.fetch = lambda: part.staging[:rows * row].clone().view((rows,) + tuple(tensor.shape[1:])).to(tensor.device)


def _outputs(parts):
    return [p.output for p in parts]


def _outputs_and_rows(parts):
    return [(p.output, p.rows) for p in parts]


def _grouped(kind, tensors, name, ps, result=_outputs, **kw):
    tensors = list(tensors)
    if not tensors:
        raise ValueError("grouped_%s needs at least one tensor" % kind)
    base = _name("grouped_" + kind, name, ps)
    names = ["%s.%d" % (base, i) for i in range(len(tensors))]
    req = _Request(result, keep=tensors)
    for i, t in enumerate(tensors):
        try:
            _submit_kind(req, kind, names[i], t, ps=ps, **kw)
        except BaseException as e:
            _refuse(names[i + 1:], e, ps)
            _abandon(req)
            raise
    return _register(req)


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts an allgather: synchronize() returns every rank's `tensor` concatenated along the
    first dimension, in rank order (first dimensions may differ, the others must agree)."""
    ps = _ps(process_set)
    req = _Request(lambda parts: parts[0].output, keep=tensor)
    _submit_kind(req, "allgather", _name("allgather", name, ps), tensor, ps=ps)
    return _register(req)


def _allgather_rows_async(tensor, name, ps=None):
    """An allgather whose synchronize() returns (output, every rank's first dimension)."""
    req = _Request(lambda parts: (parts[0].output, parts[0].rows), keep=tensor)
    _submit_kind(req, "allgather", name, tensor, ps=ps)
    return _register(req)


class _Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, ps):
        output, rows = synchronize(_allgather_rows_async(tensor, _name("allgather", name, ps), ps))
        ctx.offset, ctx.rows, ctx.ps = sum(rows[:set_rank(ps)]), tensor.shape[0], ps
        return output

    @staticmethod
    def backward(ctx, grad_output):
        # As horovod.torch: the average of every rank's gradient of the gathered tensor, this
        # rank's rows of it.
        return allreduce(grad_output, op=Average, process_set=ctx.ps).narrow(0, ctx.offset, ctx.rows), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenates every rank's `tensor` along the first dimension, in rank order. Differentiable."""
    return _Allgather.apply(tensor, name, _ps(process_set))


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Starts an allgather of each tensor; synchronize() returns the list of results."""
    return _grouped("allgather", tensors, name, _ps(process_set))


class _GroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, ps, *tensors):
        ctx.rows, ctx.ps = [t.shape[0] for t in tensors], ps
        gathered = synchronize(_grouped("allgather", tensors, name, ps, result=_outputs_and_rows))
        # This rank's offset in each output: the rows of the ranks before it.
        ctx.offsets = [sum(rows[:set_rank(ps)]) for _, rows in gathered]
        return tuple(out for out, _ in gathered)

    @staticmethod
    def backward(ctx, *grad_outputs):
        reduced = grouped_allreduce(list(grad_outputs), op=Average, process_set=ctx.ps)
        return (None, None) + tuple(g.narrow(0, o, r) for g, o, r in zip(reduced, ctx.offsets, ctx.rows))


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    return list(_GroupedAllgather.apply(name, _ps(process_set), *tensors))


def _splits_list(splits):
    if splits is None:
        return None
    if isinstance(splits, torch.Tensor):
        if splits.dtype.is_floating_point or splits.dim() != 1:
            raise ValueError("alltoall splits must be a 1-D integer tensor or a list of ints")
        return [int(s) for s in splits.tolist()]
    return [int(s) for s in splits]


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts an alltoall: rank s sends splits[d] rows (in order) to each rank d of the set (equal
    parts without splits). synchronize() returns (output, received_splits), as horovod.torch."""
    def result(parts):
        return parts[0].output, torch.tensor(parts[0].rows, dtype=torch.int32)
    ps = _ps(process_set)
    req = _Request(result, keep=tensor)
    _submit_kind(req, "alltoall", _name("alltoall", name, ps), tensor, splits=_splits_list(splits), ps=ps)
    return _register(req)


class _Alltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, ps):
        output, received = synchronize(alltoall_async(tensor, splits, name, ps))
        ctx.received, ctx.ps = received, ps
        if splits is None:
            return output
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx, grad_output, *unused):
        # What came from rank s goes back to it: an alltoall with the received splits.
        grad, _ = synchronize(alltoall_async(grad_output.contiguous(), ctx.received, process_set=ctx.ps))
        return grad, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Scatters slices of `tensor` to every rank of the set and gathers theirs. Returns the
    output, and with `splits` given also the received splits (as horovod.torch). Differentiable."""
    return _Alltoall.apply(tensor, splits, name, _ps(process_set))


def _reducescatter_op(op):
    op = Average if op is None else op
    if op == Adasum:
        raise NotSupportedError("reducescatter: Adasum is not supported by syncd; use Average or Sum")
    if op not in (Sum, Average):
        raise NotSupportedError("reducescatter supports the ops Sum and Average, not %r" % (op,))
    return op


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0):
    """Starts a reducescatter: the ranks' tensors are reduced and the first dimension divided
    among them in rank order (the first `rows % size` ranks get one row more)."""
    op = _reducescatter_op(op)
    ps = _ps(process_set)
    req = _Request(lambda parts: parts[0].output, keep=tensor)
    _submit_kind(req, "reducescatter", _name("reducescatter", name, ps), tensor, op, prescale_factor,
                 postscale_factor, ps=ps)
    return _register(req)


def _horovod_grad_scale(ctx):
    """What horovod.torch multiplies a reducescatter's gathered gradient by: the scale factors,
    and the set's size for Sum."""
    return ctx.scale * (set_size(ctx.ps) if ctx.op == Sum else 1)


class _Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor, ps):
        ctx.op, ctx.scale, ctx.ps = op, prescale_factor * postscale_factor, ps
        return synchronize(reducescatter_async(tensor, name, op, ps, prescale_factor, postscale_factor))

    @staticmethod
    def backward(ctx, grad_output):
        # Horovod's gradient: the allgather of every rank's output gradient, scaled by
        # _horovod_grad_scale (Horovod's, not the single-process derivative: Sum's is `size`
        # times it, Average's not divided by `size`; models tuned under Horovod rely on it).
        grad = allgather(grad_output.contiguous(), process_set=ctx.ps)
        return grad * _horovod_grad_scale(ctx), None, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduces `tensor` over the set's ranks and returns this rank's rows of the result.
    Differentiable."""
    op = _reducescatter_op(op)
    compressed, ctx = compression.compress(tensor)
    out = _Reducescatter.apply(compressed, name, op, prescale_factor, postscale_factor, _ps(process_set))
    return compression.decompress(out, ctx)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                                postscale_factor=1.0):
    op = _reducescatter_op(op)
    return _grouped("reducescatter", tensors, name, _ps(process_set), op=op, prescale=prescale_factor,
                    postscale=postscale_factor)


class _GroupedReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale_factor, postscale_factor, ps, *tensors):
        ctx.op, ctx.scale, ctx.ps = op, prescale_factor * postscale_factor, ps
        return tuple(synchronize(grouped_reducescatter_async(list(tensors), name, op, ps, prescale_factor,
                                                             postscale_factor)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        grads = grouped_allgather([g.contiguous() for g in grad_outputs], process_set=ctx.ps)
        return (None, None, None, None, None) + tuple(g * _horovod_grad_scale(ctx) for g in grads)


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    op = _reducescatter_op(op)
    compressed, ctxs = zip(*[compression.compress(t) for t in tensors]) if tensors else ((), ())
    out = _GroupedReducescatter.apply(name, op, prescale_factor, postscale_factor, _ps(process_set), *compressed)
    return [compression.decompress(t, c) for t, c in zip(out, ctxs)]


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """As horovod.torch: a sparse tensor's indices and values gathered from every rank of the set
    (one allgather each); the returned function waits and gives their sum (Average: divided by
    the set's size) as an uncoalesced sparse tensor of the same size."""
    ps = _ps(process_set)
    base = name if name is not None else _name("sparse_allreduce", None, ps)
    indices = allgather_async(tensor._indices().transpose(0, 1).contiguous(), name="%s.indices" % base,
                              process_set=process_set)
    values = allgather_async(tensor._values().contiguous(), name="%s.values" % base, process_set=process_set)

    def handle():
        v = synchronize(values)
        i = synchronize(indices)
        if op == Average:
            v = v / set_size(ps)
        return torch.sparse_coo_tensor(i.transpose(0, 1), v, tensor.size())
    return handle
