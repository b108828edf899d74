"""DistributedOptimizer: horovod.torch's, with gradients that live in shared memory.

Gradients of each dtype live in one flat block of the client's shared arena and every
`param.grad` is a view into it (as DDP's gradient_as_bucket_view), so autograd accumulates
straight into memory the daemon reads and writes: allreduces of gradients copy nothing. A hook on
each parameter's AccumulateGrad node submits its gradient as soon as backward produced it, so
communication overlaps the rest of the backward pass; step() (or synchronize()) waits.

Under `syncd --coord topo` the first step is recorded (see syncd.torch.topo) and its graph
registered, after which the daemons run the precomputed order and fusion plan.

With `partial='solo'|'majority'` (eager-SGD, see syncd.torch.partial) step() runs one partial
allreduce per gradient block instead: it returns as soon as the mode's round ran, with the
gradients of the ranks that were there plus what late ranks left in their daemons (a late rank's
gradient is not lost: it goes into the next round). Every `full_sync_every` steps the parameters
are averaged synchronously over every rank, so models that drifted apart agree again.
"""
import warnings
from contextlib import contextmanager

import torch

from syncd.errors import NotSupportedError
from syncd.torch import basics
from syncd.torch.adasum_optimizer import _DistributedAdasumOptimizer
from syncd.torch.basics import Average
from syncd.torch.compression import Compression
from syncd.torch.gather_scatter import sparse_allreduce_async
from syncd.torch.inplace_ops import _allreduce_async, _on_daemon, _resolve_op, allreduce_async_
from syncd.torch.parameters import parameter_names
from syncd.torch.partial import _MODES, partial_allreduce_async_
from syncd.torch.process_sets import global_process_set, is_member
from syncd.torch.requests import _ps, synchronize
from syncd.torch.topo import GraphRecorder


class _GradientArena:
    """Flat arena blocks holding the gradients of `params`, one block per dtype."""

    def __init__(self, params):
        self.blocks = []  # (address, flat tensor)
        self.firsts = []  # each block's first parameter
        self.views = {}  # param -> its gradient view
        by_dtype = {}
        for p in params:
            if p.device.type == "cpu" and p.dtype in basics._DTYPES and p.layout == torch.strided:
                by_dtype.setdefault(p.dtype, []).append(p)
        for dtype, ps in by_dtype.items():
            try:
                addr, flat = basics.arena_tensor(sum(p.numel() for p in ps), dtype)
            except MemoryError as e:
                warnings.warn("syncd: gradients of %s parameters stay out of the shared arena (%s); "
                              "each allreduce then copies them in and out" % (dtype, e))
                continue
            self.blocks.append((addr, flat))
            self.firsts.append(ps[0])
            offset = 0
            for p in ps:
                view = flat[offset:offset + p.numel()].view_as(p)
                offset += p.numel()
                with torch.no_grad():
                    if p.grad is not None:
                        view.copy_(p.grad)
                    else:
                        view.zero_()
                p.grad = view
                self.views[p] = view
        basics._arena_owners.add(self)

    def forget(self, p):
        """p's gradients are sparse: they live outside the arena from now on."""
        if self.views.pop(p, None) is not None:
            p.grad = None

    def adopt(self, p):
        """Puts p's gradient back into its view when autograd replaced it (after zero_grad with
        set_to_none, the first backward allocates a fresh tensor)."""
        view = self.views.get(p)
        if view is not None and p.grad is not None and p.grad.data_ptr() != view.data_ptr():
            with torch.no_grad():
                view.copy_(p.grad)
            p.grad = view

    def zero(self):
        for _, flat in self.blocks:
            flat.zero_()

    def release(self):
        """Moves gradients out of the arena (before the client detaches or this is dropped)."""
        for p, view in self.views.items():
            if p.grad is not None and p.grad.data_ptr() == view.data_ptr():
                p.grad = view.clone()
        self.views.clear()
        if basics.is_initialized():
            for addr, _ in self.blocks:
                basics.client().free(addr)
        self.blocks.clear()
        self.firsts.clear()

    def __del__(self):
        try:
            self.release()
        except Exception:  # interpreter shutdown: the arena goes with the process
            pass


class _DistributedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1, op=Average,
                 gradient_predivide_factor=1.0, process_set=global_process_set, sparse_as_dense=False,
                 partial=None, quorum=None, full_sync_every=0):
        super(self.__class__, self).__init__(params)
        self._partial, self._quorum, self._full_sync_every = partial, quorum, int(full_sync_every or 0)
        self._steps = 0
        self.partial_info = None  # the last step's PartialInfo (round, nap, initiator, fresh)
        self._compression = compression
        self.process_set = process_set
        self.sparse_as_dense = sparse_as_dense
        self._sparse = set()  # parameters whose gradients came sparse (nn.Embedding(sparse=True))
        self.op = _resolve_op(op, None)
        self.gradient_predivide_factor = gradient_predivide_factor
        self._parameter_names = parameter_names(self.param_groups, named_parameters)
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {v: backward_passes_per_step for v in self._parameter_names}
        self._handles = {}
        self._grad_accs = []
        self._requires_update = set()
        self._synchronized = False
        self._should_synchronize = True

        # As horovod.torch: on a rank outside process_set the optimizer registers no hooks and
        # synchronize() returns at once, so the rank trains alone on its own gradients.
        self._member = is_member(process_set, "DistributedOptimizer")
        ordered = [p for group in self.param_groups for p in group["params"] if p.requires_grad and self._member]
        self._grads = _GradientArena(ordered)
        # A TOPO plan is the whole job's: only an optimizer over every rank records one (a set's
        # names are negotiated on demand within the set). A replacement of a lost rank (hvd.elastic)
        # joins a job whose ranks registered theirs long ago: it follows that plan.
        whole_job = process_set is None or process_set is global_process_set
        self._recorder = (GraphRecorder(self) if basics.coord_mode() == "topo" and partial is None and whole_job
                          and self._member and not basics.client().replaces_lost_rank() else None)
        for p in ordered:
            self._requires_update.add(p)
            grad_acc = p.expand_as(p).grad_fn.next_functions[0][0]
            grad_acc.register_hook(self._make_hook(p))
            self._grad_accs.append(grad_acc)
            p.register_hook(self._make_sparse_check(p))

    def _make_sparse_check(self, p):
        # Runs on the incoming gradient before it is accumulated: a sparse one must not be added
        # into the dense arena view, or it comes back dense (and torch.optim.SparseAdam refuses it).
        def check(grad):
            if grad.is_sparse and p not in self._sparse:
                self._sparse.add(p)
                self._grads.forget(p)
            return grad
        return check

    def load_state_dict(self, *args, **kwargs):
        self._handles = {}
        self._synchronized = False
        self._should_synchronize = True
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        super(self.__class__, self).load_state_dict(*args, **kwargs)

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def _allreduce_grad_async(self, p):
        if p.grad is None and p in self._sparse:
            # Another rank's gradient may have rows: an empty sparse one takes part.
            p.grad = torch.sparse_coo_tensor(torch.empty(1, 0, dtype=torch.int64),
                                             torch.empty((0,) + tuple(p.shape[1:]), dtype=p.dtype), p.shape)
        if p.grad is None:
            # Another rank may have computed this gradient: every rank submits every name.
            p.grad = torch.zeros_like(p)
            self._grads.adopt(p)
        name = self._parameter_names.get(p)
        grad = p.grad
        if grad.is_sparse:
            if self.sparse_as_dense:
                # Reduced densely; synchronize() makes the result sparse again (as horovod.torch),
                # so sparse optimizers (SparseAdam) still get a sparse gradient.
                grad = grad.to_dense()
            else:
                # As horovod.torch: the indices and values of every rank, gathered.
                return sparse_allreduce_async(grad, name, self.op, process_set=self.process_set), None
        on_daemon = _on_daemon(self._compression, grad, self.op)  # else compressed here, as Horovod does
        compressed, ctx = (grad, None) if on_daemon else self._compression.compress(grad)
        if self.op == Average:
            prescale, postscale = 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        else:
            prescale, postscale = 1.0, 1.0
        handle = _allreduce_async(compressed, compressed, name, self.op, prescale, postscale,
                                  _ps(self.process_set), on_daemon)
        if self._recorder is not None:
            self._recorder.submitted(p, "allreduce." + name, compressed, on_daemon)
        return handle, ctx

    def _make_hook(self, p):
        def hook(*ignore):
            if p in self._handles and self._handles[p][0] is not None and self._allreduce_delay[p] <= 0:
                raise AssertionError("Gradients were computed more than backward_passes_per_step times "
                                     "before call to step(). Increase backward_passes_per_step to "
                                     "accumulate gradients locally.")
            assert not p.grad.requires_grad
            assert self._allreduce_delay[p] > 0
            if p not in self._sparse:
                self._grads.adopt(p)
            handle, ctx = None, None
            self._allreduce_delay[p] -= 1
            if self._allreduce_delay[p] == 0 and self._partial is None:
                handle, ctx = self._allreduce_grad_async(p)
            self._handles[p] = (handle, ctx)
        return hook

    def synchronize(self):
        """Waits for every gradient's allreduce (submitting those backward did not produce)."""
        if not self._member:
            self._synchronized = True
            return
        if self._partial is not None:
            return self._partial_synchronize()
        for p in self._requires_update - set(self._handles):
            self._handles[p] = self._allreduce_grad_async(p)
        for p, (handle, ctx) in list(self._handles.items()):
            if handle is None:
                self._handles[p] = self._allreduce_grad_async(p)
        try:
            for p, (handle, ctx) in self._handles.items():
                self._allreduce_delay[p] = self.backward_passes_per_step
                if callable(handle):  # a sparse gradient's gather
                    p.grad = handle()
                    continue
                output = synchronize(handle)
                result = self._compression.decompress(output, ctx)
                if p.grad.is_sparse:  # sparse_as_dense: back to the gradient's own sparse layout
                    p.grad = result.to_sparse(p.grad.sparse_dim())
                elif result.data_ptr() != p.grad.data_ptr():
                    with torch.no_grad():
                        p.grad.copy_(result)
        finally:
            self._handles.clear()
        if self._recorder is not None:
            self._recorder.step_done()
        self._synchronized = True

    def _partial_synchronize(self):
        """One partial allreduce per arena block of gradients (in place, no copy), and one per
        gradient outside the arena."""
        if self._sparse:
            raise ValueError("DistributedOptimizer(partial=...) does not take sparse gradients; "
                             "use sparse_as_dense=True")
        handles = []
        try:
            for p in self._requires_update:
                view = self._grads.views.get(p)
                if view is not None and p.grad is None:
                    view.zero_()  # a parameter backward did not reach contributes zeros
                    p.grad = view
                elif view is not None:
                    self._grads.adopt(p)
            for first, (_, flat) in zip(self._grads.firsts, self._grads.blocks):
                # Named after the block's first parameter: unique to this optimizer's parameters.
                name = "grads.%s.%s" % (self._parameter_names[first], str(flat.dtype).replace("torch.", ""))
                handles.append((partial_allreduce_async_(flat, name=name, mode=self._partial,
                                                         quorum=self._quorum, op=self.op,
                                                         process_set=self.process_set), None))
            for p in sorted(self._requires_update - set(self._grads.views), key=self._parameter_names.get):
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                handles.append((partial_allreduce_async_(p.grad, name="grads." + self._parameter_names[p],
                                                         mode=self._partial, quorum=self._quorum, op=self.op,
                                                         process_set=self.process_set), p))
        finally:
            infos = [synchronize(h).partial_info for h, _ in handles]
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        self._handles.clear()
        self.partial_info = infos[0] if infos else None
        self._synchronized = True

    def average_parameters(self):
        """The periodic full synchronisation of partial training (every rank calls it): every
        rank's parameters averaged. step() calls it every full_sync_every steps."""
        handles = []
        with torch.no_grad():
            for p in sorted(self._requires_update, key=self._parameter_names.get):
                handles.append(allreduce_async_(p.data, name="partial.model." + self._parameter_names[p],
                                                op=Average, process_set=self.process_set))
            for h in handles:
                synchronize(h)

    @contextmanager
    def skip_synchronize(self):
        """optimizer.synchronize(); with optimizer.skip_synchronize(): optimizer.step()"""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() context after "
                              "optimizer.synchronize(). This can cause training slowdown. You may want to "
                              "consider using optimizer.skip_synchronize() context if you use "
                              "optimizer.synchronize() in your code.")
            self.synchronize()
        self._synchronized = False
        loss = super(self.__class__, self).step(closure)
        self._steps += 1
        if self._partial is not None and self._full_sync_every and self._steps % self._full_sync_every == 0:
            self.average_parameters()
        return loss

    def zero_grad(self, set_to_none=False):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but before "
                                 "optimizer.step() or optimizer.synchronize(). This is prohibited as it can "
                                 "cause a race condition.")
        if set_to_none:
            return super(self.__class__, self).zero_grad(set_to_none=True)
        # Zero the arena blocks in place: the gradients stay views the daemon reduces directly.
        self._grads.zero()
        for group in self.param_groups:
            for p in group["params"]:
                view = self._grads.views.get(p)
                if p.grad is None or (view is not None and p.grad.data_ptr() == view.data_ptr()):
                    continue
                if p.grad.is_sparse:  # the next backward starts a new sparse gradient
                    p.grad = None
                    continue
                if p.grad.grad_fn is not None:
                    p.grad.detach_()
                else:
                    p.grad.requires_grad_(False)
                p.grad.zero_()


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none, backward_passes_per_step=1,
                         op=Average, gradient_predivide_factor=1.0, num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=global_process_set, partial=None, quorum=None, full_sync_every=0):
    """Wraps a torch.optim optimizer so that step() applies gradients averaged (op) over all ranks.

    Same arguments and behaviour as horovod.torch.DistributedOptimizer. num_groups/groups are
    accepted and ignored: the daemon fuses tensors itself (and by plan under --coord topo). With
    `process_set`, gradients are averaged over the set's ranks; on a rank outside it step() is the
    wrapped optimizer's alone (no communication), as in Horovod. sparse_as_dense=True reduces
    sparse gradients densely and hands the optimizer a sparse gradient again (SparseAdam works).

    syncd's own: partial='solo' or 'majority' (with quorum k) trains with eager-SGD's partial
    allreduce instead (see the module's doc); full_sync_every=N averages the parameters over every
    rank every N steps (0: never)."""
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if partial is not None:
        if partial not in _MODES:
            raise ValueError("partial must be 'solo' or 'majority', not %r" % (partial,))
        if op not in (Average, basics.Sum) or gradient_predivide_factor != 1.0 or compression is not Compression.none:
            raise ValueError("DistributedOptimizer(partial=...) takes op=Average or Sum, no compression and no "
                             "gradient_predivide_factor")
    elif quorum is not None or full_sync_every:
        raise ValueError("quorum and full_sync_every go with partial='solo' or 'majority'")
    if not isinstance(full_sync_every, int) or full_sync_every < 0:
        raise ValueError("full_sync_every must be an int >= 0, not %r" % (full_sync_every,))
    if op == basics.Adasum and basics.size() > 1:
        # Horovod's: each rank steps on its own gradients and the updates are Adasum-reduced.
        if partial is not None or sparse_as_dense:
            raise ValueError("DistributedOptimizer(op=Adasum) takes no partial= and no sparse_as_dense=")
        if process_set is not global_process_set and process_set is not None:
            raise NotSupportedError("DistributedOptimizer(op=Adasum) runs over every rank; process_set is not "
                                    "supported with it (as Horovod's)")
        cls = type(optimizer.__class__.__name__, (optimizer.__class__,), dict(_DistributedAdasumOptimizer.__dict__))
        return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step)
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step, op,
               gradient_predivide_factor, process_set, sparse_as_dense, partial, quorum, full_sync_every)
