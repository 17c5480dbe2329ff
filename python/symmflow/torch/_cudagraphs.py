"""PyTorch's own CUDA graphs around a compiled graph: `torch.compile(m, backend="symmflow",
mode="reduce-overhead")` (issue 17, item 4).

Expects: a callable over flat tensor arguments (AOT autograd's compiled forward) whose symmflow
partitions run on PyTorch's current stream (Note [caller's stream] in
src/exec/executable_device.cpp), so that a capture of that stream captures them too.
Guarantees: the first call runs eagerly (it compiles, allocates and rendezvouses: nothing of that
may happen inside a capture), the second captures the call into a `torch.cuda.CUDAGraph`, later
calls replay it. An argument at the same address on the first two calls (a parameter, a buffer, a
static KV cache) is read in place by the graph; any other is copied into a static buffer before
each replay. A call whose in-place arguments moved (or whose shapes changed: dynamo would have
recompiled) re-captures. Outputs are returned as clones, so a replay never overwrites what an
earlier call returned. Refuses: nothing; calls with non-CUDA tensors run without a graph.
"""
from __future__ import annotations

import torch


class GraphedCallable:
    """`fn` captured by PyTorch's CUDA graphs from its second call on (see the module doc)."""

    def __init__(self, fn):
        self.fn = fn
        self.first_ptrs = None  # addresses of the first call's tensor arguments
        self.graph = None
        self.captures = 0
        self.replays = 0

    @staticmethod
    def _ptrs(args):
        return [a.data_ptr() if isinstance(a, torch.Tensor) else None for a in args]

    def __call__(self, *args):
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if not tensors or any(not t.is_cuda for t in tensors):
            return self.fn(*args)
        if self.first_ptrs is None:  # warm-up: compiles, allocates, rendezvouses
            self.first_ptrs = self._ptrs(args)
            return self.fn(*args)
        if self.graph is None or not self._fits(args):
            self._capture(args)
        else:
            for buffer, a in zip(self.buffers, args):
                if buffer is not None:
                    buffer.copy_(a)
            self.graph.replay()
            self.replays += 1
        return self._outputs()

    def _fits(self, args) -> bool:
        if len(args) != len(self.static_args):
            return False
        for a, s, buffer in zip(args, self.static_args, self.buffers):
            if not isinstance(a, torch.Tensor):
                if a != s:
                    return False
            elif a.shape != s.shape or a.dtype != s.dtype or a.stride() != s.stride():
                return False
            elif buffer is None and a.data_ptr() != s.data_ptr():
                return False
        return True

    def _capture(self, args):
        ptrs = self._ptrs(args)
        self.buffers, self.static_args = [], []
        for a, first in zip(args, self.first_ptrs + [None] * len(args)):
            if isinstance(a, torch.Tensor) and a.data_ptr() != first:
                buffer = a.clone()
                self.buffers.append(buffer)
                self.static_args.append(buffer)
            else:
                self.buffers.append(None)
                self.static_args.append(a)
        self.first_ptrs = ptrs  # a re-capture keeps in place what stayed since this call
        torch.cuda.current_stream().synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
            self.static_outputs = self.fn(*self.static_args)
        self.captures += 1
        self.graph.replay()  # capture records the work without running it
        self.replays += 1

    def _outputs(self):
        out = self.static_outputs

        def clone(x):
            return x.clone() if isinstance(x, torch.Tensor) else x

        if isinstance(out, (list, tuple)):
            return type(out)(clone(x) for x in out)
        return clone(out)
