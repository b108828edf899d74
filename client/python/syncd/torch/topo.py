"""TOPO from autograd: record the first training step's backward graph and register it.

Under `syncd --coord topo`, DistributedOptimizer records its first step:
- the graph autograd will run, taken from the loss handed to the first backward() (walking
  grad_fn.next_functions; each AccumulateGrad node is mapped to its parameter), and
- each gradient's allreduce as it was submitted (name, dtype after compression, elements, op,
  host or GPU memory, the compression the daemons apply), in the order gradients became ready.
At the end of that step it registers the graph with the daemon (syncd_register_graph). Every
rank records the same model, so every daemon computes the same plan; from the second step on the
daemons issue the planned fusion groups in plan order with no negotiation.

Edges run from each backward function to the functions it feeds (next_functions), so a gradient
computed early in backward sits close to the loss and comes early in the plan. Gradients backward
did not produce (unused parameters, submitted by synchronize()) depend on every produced one and
come last.
"""
import torch

from syncd.torch import basics

_REGISTER_TIMEOUT_MS = 300_000
_recorders = []  # recorders waiting for their first backward()
_original_backward = torch.autograd.backward


def _recording_backward(*args, **kwargs):
    tensors = args[0] if args else kwargs.get("tensors")
    for recorder in list(_recorders):
        recorder._capture(tensors)
    return _original_backward(*args, **kwargs)


class GraphRecorder:
    def __init__(self, optimizer):
        self._optimizer = optimizer
        self._nodes = []  # autograd nodes, kept alive so their identity holds
        self._index = {}
        self._edges = []
        self._submissions = {}  # param -> (tensor name, dtype code, count, op, on the GPU)
        self._ready = []  # params in the order their gradients were submitted
        self.plan_hash = None
        self.registered = False
        if not _recorders:
            torch.autograd.backward = _recording_backward
        _recorders.append(self)

    def _stop_recording(self):
        if self in _recorders:
            _recorders.remove(self)
            if not _recorders:
                torch.autograd.backward = _original_backward

    def _capture(self, tensors):
        if self._nodes:
            return  # only the first backward: later ones repeat the same graph
        roots = [tensors] if torch.is_tensor(tensors) else list(tensors)
        stack = [t.grad_fn for t in roots if torch.is_tensor(t) and t.grad_fn is not None]
        for node in stack:
            self._add(node)
        while stack:
            node = stack.pop()
            for child, _ in node.next_functions:
                if child is None:
                    continue
                fresh = child not in self._index
                self._edges.append((self._index[node], self._add(child)))
                if fresh:
                    stack.append(child)
        self._stop_recording()

    def _add(self, node):
        i = self._index.get(node)
        if i is None:
            i = self._index[node] = len(self._nodes)
            self._nodes.append(node)
        return i

    def submitted(self, p, name, tensor, compression=0):
        """`compression`: what the allreduce asked the daemons for (a Compression's code: the method
        with its ratio or rank)."""
        if self.registered or p in self._submissions:
            return
        self._submissions[p] = (name, basics._DTYPES[tensor.dtype], tensor.numel(), self._optimizer.op,
                                tensor.is_cuda, compression)
        self._ready.append(p)

    def step_done(self):
        """End of a synchronize(): after the first recorded step, registers the graph."""
        if self.registered:
            return
        self.registered = True
        self._stop_recording()
        ops, edges, fetches = self.graph()
        self.plan_hash = basics.client().register_graph(ops, edges, fetches, _REGISTER_TIMEOUT_MS)
        self._nodes, self._index = [], {}

    def graph(self):
        """(ops, edges, fetches) in the form syncd._client.Client.register_graph takes."""
        param_of = {}
        for node in self._nodes:
            variable = getattr(node, "variable", None)
            if variable is not None and variable in self._submissions:
                param_of[node] = variable
        ops = []
        for node in self._nodes:
            p = param_of.get(node)
            if p is None:
                ops.append((node.name(), None, 0, 0, 0, False, 0))
            else:
                ops.append((node.name(),) + self._submissions[p])
        edges = list(self._edges)
        produced = [self._index[n] for n in param_of]
        reached = set(param_of.values())
        for p in self._ready:  # in readiness order, so the plan keeps it among equals
            if p in reached:
                continue
            i = len(ops)
            ops.append(("unused:" + self._submissions[p][0],) + self._submissions[p])
            edges.extend((j, i) for j in produced)
        has_child = {a for a, _ in edges}
        fetches = [i for i in range(len(ops)) if i not in has_child]
        return ops, edges, fetches
