"""Collectives with horovod.torch's names, defaults and semantics.

Every call submits to the node's syncd and returns a handle (the *_async forms) or waits for it.
Tensors are matched across ranks by name; unnamed calls get "<op>.noname.<n>", so every rank
must make its unnamed calls in the same order, as with Horovod.

Where the data lives: a tensor already in the client's shared arena (DistributedOptimizer's
gradients) is reduced in place by the daemon with no copy. Any other tensor is copied into an
arena block at submission and the result copied out at completion (one copy each way).

Errors: ValueError at submission for bad arguments or a name already in flight on this rank;
HorovodInternalError (a RuntimeError) from synchronize() for a collective that failed, on every
rank (mismatched shapes, dtypes, ops or roots, a lost rank or daemon). A tensor this rank refuses
(an unsupported type, say) still takes part under its name: the other ranks' requests of that name
fail naming this rank, instead of waiting for it, and unnamed calls stay in step.
"""
import contextlib
import itertools
import warnings

import torch

from syncd.errors import SyncdError
from syncd.torch import basics
from syncd.torch.basics import Adasum, Average, Sum, client, dtype_code
from syncd.torch.compression import Compression
from syncd.torch.process_sets import global_process_set, set_id, set_rank, set_size


class HorovodInternalError(SyncdError):
    """A collective failed (raised by synchronize and the blocking calls)."""

    def __init__(self, error):
        super().__init__(str(error), getattr(error, "status", None))


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


basics._shutdown_hooks.append(_forget_handles)


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


def _stage(part, tensor, output):
    """Points the part at arena memory holding `tensor`'s data; the result lands in `output`."""
    c = client()
    nbytes = tensor.numel() * tensor.element_size()
    if tensor.is_cuda:
        # The daemon reads and writes device memory in place through a CUDA IPC handle: only a
        # non-contiguous input or a separate output needs a contiguous device copy.
        if output is tensor and tensor.is_contiguous():
            return tensor.data_ptr()
        part.output = output
        with torch.no_grad():
            part.staging = tensor.reshape(-1).clone()
        return part.staging.data_ptr()
    if output is tensor and tensor.is_contiguous() and c.in_arena(tensor.data_ptr(), nbytes):
        return tensor.data_ptr()  # zero copy: the daemon reduces the tensor where it is
    part.output = output
    part.block, part.staging = basics.arena_tensor(tensor.numel(), tensor.dtype)
    with torch.no_grad():
        part.staging.copy_(tensor.reshape(-1))
    return part.block if nbytes > 0 else 0


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


def _submit(req, kind, name, tensor, output, op=Sum, prescale=1.0, postscale=1.0, root=0, ps=None):
    c = client()
    with _submitting(req, name, ps) as part:
        code = dtype_code(tensor, "tensor '%s'" % name)
        addr = _stage(part, tensor, output)
        # CUDA tensors: the daemon waits for the work queued so far on the current stream.
        stream = torch.cuda.current_stream(tensor.device).cuda_stream if tensor.is_cuda and tensor.numel() > 0 else None
        if kind == "allreduce":
            part.handle = c.allreduce_async(name, addr, code, list(tensor.shape), op, float(prescale),
                                            float(postscale), stream=stream, process_set=set_id(ps))
        else:
            part.handle = c.broadcast_async(name, addr, code, list(tensor.shape), int(root), stream=stream,
                                            process_set=set_id(ps))


def _stage_input(part, tensor):
    """Arena memory holding a copy of `tensor`'s data, for kinds whose result is not the input
    (CUDA tensors go through host memory: these kinds have no GPU path yet)."""
    c = client()
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


def _submit_kind(req, kind, name, tensor, op=Average, prescale=1.0, postscale=1.0, splits=None, ps=None):
    """allgather, alltoall, reducescatter: the input is staged, the output built at completion."""
    c = client()
    pid = set_id(ps)
    with _submitting(req, name, ps) as part:
        code = dtype_code(tensor, "tensor '%s'" % name)
        if tensor.dim() == 0:
            raise ValueError("tensor '%s': %s needs a tensor of at least one dimension" % (name, kind))
        addr = _stage_input(part, tensor)
        shape = list(tensor.shape)
        if kind == "allgather":
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


def _resolve_op(op, average):
    if op is not None and average is not None:
        raise ValueError("The op parameter supersedes average. Please provide only one of them.")
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed",
                      DeprecationWarning)
        return Average if average else Sum
    op = Average if op is None else op
    if op == Adasum:
        raise ValueError("Adasum is not supported by syncd; use Average or Sum")
    if op not in (Sum, Average, basics.Min, basics.Max, basics.Product):
        raise ValueError("unknown reduction op %r" % (op,))
    return op


def _allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor, ps):
    req = _Request(output, keep=tensor)
    _submit(req, "allreduce", _name("allreduce", name, ps), tensor, output, op, prescale_factor, postscale_factor,
            ps=ps)
    return _register(req)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    """Starts an allreduce of `tensor` into a new tensor (the input is not modified)."""
    op = _resolve_op(op, average)
    output = torch.empty_like(tensor, memory_format=torch.contiguous_format)
    return _allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor, _ps(process_set))


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """Starts an in-place allreduce of `tensor`."""
    op = _resolve_op(op, average)
    return _allreduce_async(tensor, tensor, name, op, prescale_factor, postscale_factor, _ps(process_set))


class _Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor, ps):
        ctx.op, ctx.prescale_factor, ctx.postscale_factor, ctx.ps = op, prescale_factor, postscale_factor, ps
        return synchronize(allreduce_async(tensor, name=name, op=op, prescale_factor=prescale_factor,
                                           postscale_factor=postscale_factor, process_set=ps))

    @staticmethod
    def backward(ctx, grad_output):
        return allreduce(grad_output, op=ctx.op, prescale_factor=ctx.prescale_factor,
                         postscale_factor=ctx.postscale_factor, process_set=ctx.ps), None, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` over the set's ranks (Average by default) and returns the result.
    Differentiable: the gradient of an allreduce is the allreduce of the gradient."""
    op = _resolve_op(op, average)
    compressed, ctx = compression.compress(tensor)
    reduced = _Allreduce.apply(compressed, name, op, prescale_factor, postscale_factor, _ps(process_set))
    return compression.decompress(reduced, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    """Reduces `tensor` in place and returns it."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor, process_set))


def _grouped_allreduce_async(tensors, outputs, name, op, prescale_factor, postscale_factor, ps):
    tensors = list(tensors)
    if not tensors:
        raise ValueError("grouped_allreduce needs at least one tensor")
    base = _name("grouped_allreduce", name, ps)
    names = ["%s.%d" % (base, i) for i in range(len(tensors))]
    req = _Request(outputs, keep=tensors)
    for i, (t, out) in enumerate(zip(tensors, outputs)):
        try:
            _submit(req, "allreduce", names[i], t, out, op, prescale_factor, postscale_factor, ps=ps)
        except BaseException as e:
            _refuse(names[i + 1:], e, ps)  # the parts after it never come from this rank either
            _abandon(req)
            raise
    return _register(req)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                            process_set=global_process_set):
    """Starts one allreduce of a list of tensors; synchronize() returns the list of results."""
    op = _resolve_op(op, average)
    outputs = [torch.empty_like(t, memory_format=torch.contiguous_format) for t in tensors]
    return _grouped_allreduce_async(tensors, outputs, name, op, prescale_factor, postscale_factor, _ps(process_set))


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                             process_set=global_process_set):
    op = _resolve_op(op, average)
    tensors = list(tensors)
    return _grouped_allreduce_async(tensors, tensors, name, op, prescale_factor, postscale_factor, _ps(process_set))


class _GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale_factor, postscale_factor, ps, *tensors):
        ctx.op, ctx.prescale_factor, ctx.postscale_factor, ctx.ps = op, prescale_factor, postscale_factor, ps
        return tuple(synchronize(grouped_allreduce_async(list(tensors), name=name, op=op,
                                                         prescale_factor=prescale_factor,
                                                         postscale_factor=postscale_factor, process_set=ps)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        grads = grouped_allreduce(list(grad_outputs), op=ctx.op, prescale_factor=ctx.prescale_factor,
                                  postscale_factor=ctx.postscale_factor, process_set=ctx.ps)
        return (None, None, None, None, None) + tuple(grads)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    op = _resolve_op(op, average)
    compressed, ctxs = zip(*[compression.compress(t) for t in tensors]) if tensors else ((), ())
    reduced = _GroupedAllreduce.apply(name, op, prescale_factor, postscale_factor, _ps(process_set), *compressed)
    return [compression.decompress(t, c) for t, c in zip(reduced, ctxs)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor,
                                                process_set))


def _broadcast_async(tensor, output, root_rank, name, ps):
    req = _Request(output, keep=tensor)
    _submit(req, "broadcast", _name("broadcast", name, ps), tensor, output, root=root_rank, ps=ps)
    return _register(req)


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts a broadcast of root_rank's `tensor` (a global rank of the set) into a new tensor on
    every rank of the set."""
    output = torch.empty_like(tensor, memory_format=torch.contiguous_format)
    return _broadcast_async(tensor, output, root_rank, name, _ps(process_set))


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    return _broadcast_async(tensor, tensor, root_rank, name, _ps(process_set))


class _Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, ps):
        ctx.root_rank, ctx.ps = root_rank, ps
        return synchronize(broadcast_async(tensor, root_rank, name, ps))

    @staticmethod
    def backward(ctx, grad_output):
        # As horovod.torch 0.28: the root's input gets the average of every rank's output
        # gradient, the other ranks' inputs zero.
        reduced = allreduce(grad_output, op=Average, process_set=ctx.ps)
        if basics.rank() != ctx.root_rank:
            reduced = reduced * 0
        return reduced, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    return _Broadcast.apply(tensor, root_rank, name, _ps(process_set))


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


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
        raise ValueError("Adasum is not supported by syncd; use Average or Sum")
    if op not in (Sum, Average):
        raise ValueError("reducescatter supports the ops Sum and Average, not %r" % (op,))
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


class _Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor, ps):
        ctx.op, ctx.scale, ctx.ps = op, prescale_factor * postscale_factor, ps
        return synchronize(reducescatter_async(tensor, name, op, ps, prescale_factor, postscale_factor))

    @staticmethod
    def backward(ctx, grad_output):
        # Each rank's rows of the result depend on every rank's same rows: gather the gradients.
        grad = allgather(grad_output.contiguous(), process_set=ctx.ps) * ctx.scale
        if ctx.op == Average:
            grad = grad / set_size(ctx.ps)
        return grad, None, None, None, None, None


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
        div = set_size(ctx.ps) if ctx.op == Average else 1
        return (None, None, None, None, None) + tuple(g * ctx.scale / div for g in grads)


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


def join(device=-1):
    """This rank has no more data (as horovod.torch.join): blocks until every rank has joined and
    returns the last rank to join. Meanwhile this rank takes part in the others' collectives with
    nothing of its own (zeros to reduce, no rows to gather), so training on uneven data per rank
    finishes; DistributedOptimizer's averages then count the joined ranks' zeros, as Horovod's
    do. `device` is accepted for compatibility (stand-ins live in the daemon)."""
    try:
        return client().join()
    except SyncdError as e:
        raise HorovodInternalError(e) from e


def barrier(process_set=global_process_set):
    """Returns once every rank of the set has called barrier()."""
    c = client()
    try:
        c.wait(c.barrier_async(set_id(_ps(process_set))))
    except SyncdError as e:
        raise HorovodInternalError(e) from e


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
