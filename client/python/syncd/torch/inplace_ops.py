"""allreduce and broadcast (the result has the input's shape, and may replace it in place), join
and barrier, with horovod.torch's names, defaults and semantics.

Where the data lives: a tensor already in the client's shared arena (DistributedOptimizer's
gradients) is reduced in place by the daemon with no copy. Any other tensor is copied into an
arena block at submission and the result copied out at completion (one copy each way).
"""
import warnings

import torch

from syncd.errors import SyncdError
from syncd.torch import basics
from syncd.torch.basics import Adasum, Average, Sum, client, dtype_code
from syncd.torch.compression import BF16, DAEMON_DEFAULT, FP16, Compression, daemon_compression
from syncd.torch.process_sets import global_process_set, set_id
from syncd.torch.requests import (HorovodInternalError, _abandon, _name, _ps, _refuse, _register, _Request,
                                  _submitting, synchronize)


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


def _submit(req, kind, name, tensor, output, op=Sum, prescale=1.0, postscale=1.0, root=0, ps=None, compression=0):
    c = client()
    with _submitting(req, name, ps) as part:
        code = dtype_code(tensor, "tensor '%s'" % name)
        addr = _stage(part, tensor, output)
        # CUDA tensors: the daemon waits for the work queued so far on the current stream.
        stream = torch.cuda.current_stream(tensor.device).cuda_stream if tensor.is_cuda and tensor.numel() > 0 else None
        if kind == "allreduce":
            part.handle = c.allreduce_async(name, addr, code, list(tensor.shape), op, float(prescale),
                                            float(postscale), stream=stream, process_set=set_id(ps),
                                            compression=compression)
        else:
            part.handle = c.broadcast_async(name, addr, code, list(tensor.shape), int(root), stream=stream,
                                            process_set=set_id(ps))


def _resolve_op(op, average):
    if op is not None and average is not None:
        raise ValueError("The op parameter supersedes average. Please provide only one of them.")
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed",
                      DeprecationWarning)
        return Average if average else Sum
    op = Average if op is None else op
    if op not in (Sum, Average, basics.Min, basics.Max, basics.Product, Adasum):
        raise ValueError("unknown reduction op %r" % (op,))
    return op


def _on_daemon(compression, tensor, op):
    """daemon_compression, but for Adasum: the daemons run it uncompressed, so a cast compresses
    here (as Horovod does) and the methods that sum (top-k, ...) are refused."""
    if op != Adasum:
        return daemon_compression(compression, tensor)
    if getattr(compression, "daemon", None) not in (None, FP16, BF16):
        raise ValueError("allreduce: %s sums what each node keeps, so it cannot go with Adasum; use "
                         "Compression.none or fp16" % compression.__name__)
    return DAEMON_DEFAULT


def _allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor, ps, compression=0):
    """`compression`: the syncd_compression the daemons apply (compression.daemon_compression)."""
    req = _Request(output, keep=tensor)
    _submit(req, "allreduce", _name("allreduce", name, ps), tensor, output, op, prescale_factor, postscale_factor,
            ps=ps, compression=compression)
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
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor, ps, compression):
        ctx.op, ctx.prescale_factor, ctx.postscale_factor, ctx.ps = op, prescale_factor, postscale_factor, ps
        output = torch.empty_like(tensor, memory_format=torch.contiguous_format)
        return synchronize(_allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor, ps,
                                            compression))

    @staticmethod
    def backward(ctx, grad_output):
        return allreduce(grad_output, op=ctx.op, prescale_factor=ctx.prescale_factor,
                         postscale_factor=ctx.postscale_factor, process_set=ctx.ps), None, None, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` over the set's ranks (Average by default) and returns the result.
    Differentiable: the gradient of an allreduce is the allreduce of the gradient."""
    op = _resolve_op(op, average)
    on_daemon = _on_daemon(compression, tensor, op)
    if on_daemon:
        return _Allreduce.apply(tensor, name, op, prescale_factor, postscale_factor, _ps(process_set), on_daemon)
    compressed, ctx = compression.compress(tensor)
    reduced = _Allreduce.apply(compressed, name, op, prescale_factor, postscale_factor, _ps(process_set), 0)
    return compression.decompress(reduced, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    """Reduces `tensor` in place and returns it."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor, process_set))


def _grouped_allreduce_async(tensors, outputs, name, op, prescale_factor, postscale_factor, ps, compressions=None):
    """`compressions`: each tensor's syncd_compression (None: the daemon's default for all)."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError("grouped_allreduce needs at least one tensor")
    base = _name("grouped_allreduce", name, ps)
    names = ["%s.%d" % (base, i) for i in range(len(tensors))]
    req = _Request(outputs, keep=tensors)
    for i, (t, out) in enumerate(zip(tensors, outputs)):
        try:
            _submit(req, "allreduce", names[i], t, out, op, prescale_factor, postscale_factor, ps=ps,
                    compression=compressions[i] if compressions else 0)
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
    def forward(ctx, name, op, prescale_factor, postscale_factor, ps, compressions, *tensors):
        ctx.op, ctx.prescale_factor, ctx.postscale_factor, ctx.ps = op, prescale_factor, postscale_factor, ps
        outputs = [torch.empty_like(t, memory_format=torch.contiguous_format) for t in tensors]
        return tuple(synchronize(_grouped_allreduce_async(list(tensors), outputs, name, op, prescale_factor,
                                                          postscale_factor, ps, compressions)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        grads = grouped_allreduce(list(grad_outputs), op=ctx.op, prescale_factor=ctx.prescale_factor,
                                  postscale_factor=ctx.postscale_factor, process_set=ctx.ps)
        return (None, None, None, None, None, None) + tuple(grads)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    op = _resolve_op(op, average)
    on_daemon = [_on_daemon(compression, t, op) for t in tensors]
    pairs = [(t, None) if d else compression.compress(t) for t, d in zip(tensors, on_daemon)]
    compressed, ctxs = zip(*pairs) if tensors else ((), ())
    reduced = _GroupedAllreduce.apply(name, op, prescale_factor, postscale_factor, _ps(process_set), on_daemon,
                                      *compressed)
    return [t if d else compression.decompress(t, c) for t, c, d in zip(reduced, ctxs, on_daemon)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor,
                                                process_set))


def _broadcast_async(tensor, output, root_rank, name, ps):
    req = _Request(output, keep=tensor)
    _submit(req, "broadcast", _name("broadcast", name, ps), tensor, output, root=basics.launch_rank(root_rank), ps=ps)
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
