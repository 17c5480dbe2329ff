"""PyTorch's own CUDA graphs around a compiled graph: `torch.compile(m, backend="symmflow",
mode="reduce-overhead")` (issue 17, item 4).

Expects: a callable over flat tensor arguments (AOT autograd's compiled forward) whose symmflow
partitions run on PyTorch's current stream (Note [caller's stream] in
src/exec/executable_device.cpp), so that a capture of that stream captures them too.
Guarantees: the first call runs eagerly (it compiles, allocates and rendezvouses: nothing of that
may happen inside a capture), the second captures the call into a `torch.cuda.CUDAGraph`, later
calls replay it. An argument at the same address on the first two calls (a parameter, a buffer, a
static KV cache) is read and written in place by the graph; any other is copied into a static
buffer before each replay, and, when the graph writes it (`mutated`: AOT keeps an inference graph's
input mutations in the graph, Note [the KV cache in place] in _fx_state.py), copied back into the
caller's tensor after it. A call whose in-place arguments moved (or whose shapes changed: dynamo
would have recompiled) re-captures. Outputs are returned as clones, so a replay never overwrites
what an earlier call returned.
Refuses: nothing; calls with non-CUDA tensors, or with an int argument (one dynamo made dynamic:
it changes every call), run without a graph.
"""
from __future__ import annotations

import torch

# Note [replay checks]: a replay checks, per argument, only what its capture fixed, in one pass
# over lists made at capture: an argument read in place must be at the captured address (a tensor
# at that address has the captured shape, dtype and strides: dynamo's guards fix them, and
# symmflow compiles static shapes only), one copied into a static buffer must be a GPU tensor of
# the buffer's shape and dtype (copy_ would broadcast or convert silently), a non-tensor must
# equal the captured value. Anything else re-captures. The steady-state call does nothing more
# (it cost 38 us of host time a call for the decoder layer's 12 tensors when every argument's
# shape, strides and address were compared through generic loops; tools/device/host_path.py).


class GraphedCallable:
    """`fn` captured by PyTorch's CUDA graphs from its second call on (see the module doc)."""

    def __init__(self, fn, mutated=()):
        self.fn = fn
        self.mutated = frozenset(mutated)  # positions of the arguments the graph writes
        self.first_ptrs = None  # addresses of the first call's tensor arguments
        self.graph = None
        self.captures = 0
        self.replays = 0

    @staticmethod
    def _ptrs(args):
        return [a.data_ptr() if isinstance(a, torch.Tensor) else None for a in args]

    def __call__(self, *args):
        if self.graph is not None and self._replayable(args):  # the steady state
            for buffer, i in self.copied:
                buffer.copy_(args[i])
            self.graph.replay()
            self.replays += 1
            for buffer, i in self.copied_back:
                args[i].copy_(buffer)
            return self._outputs()
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if not tensors or any(not t.is_cuda for t in tensors):
            return self.fn(*args)
        if any(isinstance(a, int) and not isinstance(a, bool) for a in args):
            # An int input changes every call (Note [ints that change every call] in _fx_state.py):
            # a capture would fix it, and its upload to the GPU cannot run inside one.
            return self.fn(*args)
        if self.first_ptrs is None:  # warm-up: compiles, allocates, rendezvouses
            self.first_ptrs = self._ptrs(args)
            return self.fn(*args)
        self._capture(args)
        return self._outputs()

    def _replayable(self, args) -> bool:
        """Whether the captured graph serves these arguments (Note [replay checks])."""
        if len(args) != self.n_args:
            return False
        for i, ptr in self.in_place:
            a = args[i]
            if not isinstance(a, torch.Tensor) or a.data_ptr() != ptr:
                return False
        for buffer, i in self.copied:
            a = args[i]
            if (not isinstance(a, torch.Tensor) or not a.is_cuda or a.shape != buffer.shape
                    or a.dtype != buffer.dtype):
                return False
        for i, value in self.constants:
            if args[i] != value:
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
        self.n_args = len(args)
        self.in_place = [(i, s.data_ptr()) for i, (s, b) in
                         enumerate(zip(self.static_args, self.buffers))
                         if b is None and isinstance(s, torch.Tensor)]
        self.copied = [(b, i) for i, b in enumerate(self.buffers) if b is not None]
        self.copied_back = [(b, i) for b, i in self.copied if i in self.mutated]
        self.constants = [(i, s) for i, s in enumerate(self.static_args)
                          if not isinstance(s, torch.Tensor)]
        torch.cuda.current_stream().synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
            self.static_outputs = self.fn(*self.static_args)
        self.captures += 1
        self.graph.replay()  # capture records the work without running it
        self.replays += 1
        for buffer, i in self.copied_back:
            args[i].copy_(buffer)

    def _outputs(self):
        out = self.static_outputs

        def clone(x):
            return x.clone() if isinstance(x, torch.Tensor) else x

        if isinstance(out, (list, tuple)):
            return type(out)(clone(x) for x in out)
        return clone(out)
