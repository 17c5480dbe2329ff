"""The whole compiled call checked against the graph dynamo traced, under SYMMFLOW_TORCH_VERIFY=1
(Note [verify against dynamo's graph]).

What it does: `reference_of(gm)` copies dynamo's graph before the backend rewrites it;
`VerifiedCall(compiled, reference)` is the compiled callable that, at every call, first runs the
copy in PyTorch on clones of the arguments (no grad), then the compiled call on the arguments
themselves, and compares every output and every argument as it is after the call (a KV cache the
graph writes in place) with PyTorch's. It raises symmflow.Error naming the output or argument and
the error.
Expects: dynamo's GraphModule before any of the backend's rewrites, and the callable the backend
returns for it; the arguments dynamo passes (tensors, DTensors, numbers).
Guarantees: the compiled call's results are returned unchanged when they agree; tolerances are the
partition check's (_runner._check_close: 1e-4 relative to the largest element in f32, 2e-2 in
bf16 and f16); DTensors are compared by their local shards (no collective added beyond the
reference run's own, which every rank makes alike); a graph with random ops (dropout) differs
from its reference by construction: verify mode is for deterministic graphs.
"""

from __future__ import annotations

import copy

import torch
import torch.fx

import symmflow

from ._runner import _check_close

__all__ = ["VerifiedCall", "reference_of"]


# Note [verify against dynamo's graph]: the partition check (Note [binding torch tensors] in
# _runner.py, `_verify`) compares each symmflow partition with PyTorch's run of the same ATen
# graph, so it cannot see a graph that is already wrong when it reaches the partitions. One was:
# the causal-mask rewrite of dynamo's graph (before AOT autograd) dropped a StaticCache's in-place
# writes with the mask's dead code (Note [only the mask's nodes removed] in _causal.py), and every
# partition agreed with its wrong ATen graph. The whole call is therefore also compared with
# dynamo's graph as traced, before anything of the backend touched it: what the user's model
# computes under eager PyTorch, on the same arguments.
def reference_of(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    graph = copy.deepcopy(gm.graph)
    return torch.fx.GraphModule(gm, graph)


def _local(t):
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) else t


def _clone(a):
    return a.detach().clone() if isinstance(a, torch.Tensor) else a


class VerifiedCall:
    """The compiled callable, each call checked against dynamo's graph run by PyTorch."""

    def __init__(self, compiled, reference: torch.fx.GraphModule):
        self.compiled = compiled
        self.reference = reference

    def __getattr__(self, name):  # what dynamo or AOT look up on the compiled callable
        return getattr(self.compiled, name)

    def __call__(self, *args):
        clones = [_clone(a) for a in args]
        with torch.no_grad():
            want = self.reference(*clones)
        got = self.compiled(*args)
        want_list = list(want) if isinstance(want, (tuple, list)) else [want]
        got_list = list(got) if isinstance(got, (tuple, list)) else [got]
        if len(want_list) != len(got_list):
            raise symmflow.Error(f"SYMMFLOW_TORCH_VERIFY: the compiled call returned "
                                 f"{len(got_list)} values, dynamo's graph {len(want_list)}")
        for i, (w, g) in enumerate(zip(want_list, got_list)):
            if isinstance(w, torch.Tensor):
                _check_close(_local(w).detach(), _local(g).detach(),
                             f"output {i} of the compiled call against dynamo's graph")
        for i, (c, a) in enumerate(zip(clones, args)):
            if isinstance(a, torch.Tensor):
                _check_close(_local(c), _local(a).detach(),
                             f"argument {i} after the compiled call against dynamo's graph")
        return got
