"""DistributedOptimizer(op=Adasum): horovod.torch's Adasum optimizer.

Adasum reduces model updates, not gradients: as soon as backward produced a parameter's gradient,
this rank steps the wrapped optimizer on that parameter alone (its momentum and other state are
this rank's own), takes the update it made (the new value less the old) and starts an Adasum
allreduce of it; step() waits for each and applies the combined update to the value the parameter
had before. Orthogonal updates add, parallel ones average, so the learning rate needs no scaling by
the number of ranks (Maleki et al., MLSys 2021). The daemons run the reduction (float host
tensors, a power of two of ranks); Compression.fp16 casts here, as Horovod does.
"""
from contextlib import contextmanager

import torch

from syncd.torch.basics import Adasum
from syncd.torch.inplace_ops import allreduce_async_
from syncd.torch.parameters import parameter_names
from syncd.torch.requests import synchronize


class _DistributedAdasumOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1):
        super(self.__class__, self).__init__(params)
        self._compression = compression
        self._parameter_names = parameter_names(self.param_groups, named_parameters)
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {v: backward_passes_per_step for v in self._parameter_names}
        # Where each parameter was before this rank's step: the combined update is added to it.
        self._starting_models = {p: torch.zeros_like(p, requires_grad=False) for p in self._parameter_names}
        self._handles = {}
        self._grad_accs = []
        self._requires_update = set()
        for group in self.param_groups:
            for p in group["params"]:
                if not p.requires_grad:
                    continue
                self._requires_update.add(p)
                grad_acc = p.expand_as(p).grad_fn.next_functions[0][0]
                grad_acc.register_hook(self._make_hook(p))
                self._grad_accs.append(grad_acc)

    def _allreduce_update_async(self, p):
        """Steps the wrapped optimizer on `p` alone and starts the Adasum allreduce of its update."""
        start = self._starting_models[p]
        with torch.no_grad():
            start.copy_(p)
        stashed = [group["params"] for group in self.param_groups]
        for group in self.param_groups:
            group["params"] = [p] if any(p is v for v in group["params"]) else []
        try:
            super(self.__class__, self).step()
        finally:
            for group, kept in zip(self.param_groups, stashed):
                group["params"] = kept
        with torch.no_grad():
            p.sub_(start)  # p holds this rank's update until step() puts the combined one in place
        compressed, ctx = self._compression.compress(p.data)
        return allreduce_async_(compressed, name=self._parameter_names.get(p), op=Adasum), ctx

    def _make_hook(self, p):
        def hook(*ignore):
            if p in self._handles and self._handles[p][0] is not None and self._allreduce_delay[p] <= 0:
                raise AssertionError("Gradients were computed more than backward_passes_per_step times "
                                     "before call to step(). Increase backward_passes_per_step to "
                                     "accumulate gradients locally.")
            assert not p.grad.requires_grad
            assert self._allreduce_delay[p] > 0
            handle, ctx = None, None
            self._allreduce_delay[p] -= 1
            if self._allreduce_delay[p] == 0:
                handle, ctx = self._allreduce_update_async(p)
            self._handles[p] = (handle, ctx)
        return hook

    def synchronize(self):
        """Nothing to wait for before step(): the updates are what is reduced (as Horovod's)."""

    @contextmanager
    def skip_synchronize(self):
        raise AssertionError("Skipping synchronization is not supported when using Adasum optimizer.")
        yield  # pragma: no cover

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for p in self._requires_update - set(self._handles):  # backward did not reach it
            self._handles[p] = self._allreduce_update_async(p)
        try:
            for p, (handle, ctx) in list(self._handles.items()):
                if handle is None:  # step() before backward_passes_per_step backward passes
                    handle, ctx = self._allreduce_update_async(p)
                update = self._compression.decompress(synchronize(handle), ctx)
                start = self._starting_models[p]
                with torch.no_grad():
                    start.add_(update)
                    p.copy_(start)
                self._allreduce_delay[p] = self.backward_passes_per_step
        finally:
            self._handles.clear()
        return loss
