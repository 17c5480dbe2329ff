"""A compiled partition bound to this rank, called with the partition's torch tensors.

Expects: a Session of the partition's compiled program, the imported graph (how the FX graph's
outputs come from the program's results) and the compile report the call counts its copies in.
Guarantees: the call returns what the FX partition returns, computed by the Session on PyTorch's
current stream (Note [streams]); from its second call, a call whose tensors are of the program's
shapes, dtypes and device takes the pointer path (Note [pointer call]): each tensor is passed as
its address, nothing is converted per tensor (a strided one is copied dense first: Note [strided
inputs on the pointer path]). Any other call (the first, a tensor of another shape, dtype or
device, SYMMFLOW_TORCH_VERIFY) takes the checked path, which converts through DLPack.
Refuses: nothing itself; the Session's errors (symmflow.Error) pass through, any other exception
poisons the world first (a rank failing would leave its peers waiting in a collective).
"""
from __future__ import annotations

import torch

import symmflow

from . import _library

# Note [streams]: on a GPU a compiled partition runs on PyTorch's current stream: Session.run_into
# gets that stream, the plan's work forks off it and joins back (Note [caller's stream] in
# src/exec/executable_device.cpp), and no host thread waits. The outputs are torch tensors the
# runner allocates with PyTorch's caching allocator on that stream, written by the run itself, so
# inside torch.cuda.graph (and mode="reduce-overhead", _cudagraphs) the whole call is captured
# into PyTorch's graph. Inputs already on the GPU and contiguous are read in place (the plan's own
# CUDA graph is captured per input binding: Note [device inputs], same file).

# Note [CPU scalars on a GPU]: PyTorch mixes 0-dim CPU tensors with GPU tensors (transformers'
# masks fill with a CPU scalar constant); a GPU partition takes such an input as a GPU copy, made
# once per constant (the same tensor, unchanged, on later calls; counted as constant_uploads), so a
# steady-state call, and a CUDA graph capture after the first call, copies nothing. A node that
# mixes a larger CPU tensor with GPU tensors stays in PyTorch (unsupported_reason in
# _support.py).

# Note [binding torch tensors]: a partition's inputs reach the Session as the torch tensors
# themselves (no copy); a non-contiguous input is made contiguous first and counted in the
# report (`input_copies`). Outputs are torch tensors the runner allocates and the run writes
# (run_into), on the CPU and on GPUs alike, so they stay valid after the next call.

# Note [pointer call]: the steady-state call passes each input and output as its address
# (Session.run_pointers, python/src/session.cpp): through DLPack each tensor cost a Python-level
# __dlpack__ call, a capsule and a detach, which for the decoder layer's 12 tensors was most of the
# 78 us the backend added to a call on a GPU. Only what the program's specs fix is passed this way,
# so the runner checks per tensor, in Python, exactly what the addresses leave out: contiguous, the
# spec's shape and dtype, on the session's device. Dynamo's guards already pin shapes and dtypes
# (symmflow compiles static shapes only); the check keeps a call that bypasses them (a direct
# call of the runner, a backward's inputs) from reading out of bounds. Any tensor that fails it
# sends the whole call down the checked DLPack path, which copies or raises as before.
#
# Note [strided inputs on the pointer path]: a training step's backward reads the attention
# outputs its forward saved, which come back in the layout PyTorch traced (Note [output strides]
# in _backend.py: [B, S, H, D] memory behind a [B, H, S, D] shape), so two of a two-layer Llama
# backward's 63 inputs were strided and every backward call took the checked path: 63 DLPack
# conversions where the pointer path converts none. A strided input of the right shape, dtype and
# device is now copied dense (the copy the checked path made too) and passed by address with
# the rest. The copy is made on the current stream and released after the run is enqueued on
# that stream, so the caching allocator reuses its memory only after the run read it.


class PartitionRunner:
    """A compiled partition bound to this rank: called with the partition's torch tensors."""

    pointer_path = True  # False: every call converts through DLPack (for measurements and tests)

    def __init__(self, imported, session, rank, report, single_output: bool, device: str = "cpu"):
        self.imported, self.session, self.rank, self.report = imported, session, rank, report
        self.single_output = single_output  # the submodule returns one value, not a tuple
        self.cuda = session.device_description != "cpu"
        self.device = torch.device(device)
        if self.cuda and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.cuda_index = self.device.index if self.cuda else None
        self.outputs = [(torch.Size(o.shape), _library.TORCH_DTYPES[o.dtype])
                        for o in session.outputs]
        self.inputs = [(torch.Size(i.shape), _library.TORCH_DTYPES[i.dtype])
                       for i in session.inputs]
        self.counted = False
        self.device_copies: dict[int, tuple] = {}  # input index -> (cpu tensor, version, copy)
        self.verify = None  # the partition's FX module under SYMMFLOW_TORCH_VERIFY=1
        self.strides: dict[int, tuple] = {}  # output index -> the strides PyTorch traced
        self.restrided = False
        self.pointer_calls = 0  # calls that took Note [pointer call]'s path
        self.checked_calls = 0  # calls that took the DLPack path

    def _restride(self, outs: tuple) -> tuple:
        """Note [output strides] (_backend.py): outputs laid out as PyTorch traced them."""
        outs = list(outs)
        copies = 0
        for i, stride in self.strides.items():
            t = outs[i]
            if isinstance(t, torch.Tensor) and t.stride() != stride:
                outs[i] = _laid_out(t, stride)
                copies += 1
        if not self.restrided:
            self.report.output_copies += copies
            self.restrided = True
        return tuple(outs)

    def _on_device(self, index: int, t: torch.Tensor) -> torch.Tensor:
        """The GPU copy of a 0-dim CPU input, made once while the same unchanged tensor (a
        graph constant) comes back."""
        cached = self.device_copies.get(index)
        if cached is not None and cached[0] is t and cached[1] == t._version:
            return cached[2]
        copy = t.to(self.device)
        self.device_copies[index] = (t, t._version, copy)
        return copy

    def _pointers(self, args) -> tuple[list, list] | None:
        """The inputs' addresses when every one may be passed as an address (Note [pointer
        call]), else None; with them the dense copies made of strided inputs (Note [strided
        inputs on the pointer path]), to be kept alive through the call."""
        if (not self.pointer_path or len(args) != len(self.inputs) or self.verify is not None
                or not self.counted):
            return None
        pointers, dense = [], []
        for i, (a, (shape, dtype)) in enumerate(zip(args, self.inputs)):
            if self.cuda and not a.is_cuda and i in self.device_copies:
                a = self._on_device(i, a)  # Note [CPU scalars on a GPU]: uploaded once
            if (a.dtype is not dtype or a.shape != shape or a.is_cuda is not self.cuda
                    or (self.cuda and a.get_device() != self.cuda_index)):
                return None
            if not a.is_contiguous():
                a = a.contiguous()
                dense.append(a)
            pointers.append(a.data_ptr())
        return pointers, dense

    def _empty_outputs(self) -> list:
        return [torch.empty(shape, dtype=dtype, device=self.device)
                for shape, dtype in self.outputs]

    def _stream(self):
        return torch._C._cuda_getCurrentRawStream(self.cuda_index) if self.cuda else None

    def _checked_inputs(self, args) -> list:
        tensors, copies, uploads = [], 0, 0
        for i, a in enumerate(args):
            if self.cuda and not a.is_cuda:  # Note [CPU scalars on a GPU]
                a = self._on_device(i, a)
                uploads += 1
            if not a.is_contiguous():
                a = a.contiguous()
                copies += 1
            tensors.append(a.detach())
        if not self.counted:  # the report counts one call's copies
            self.report.input_copies += copies
            self.report.constant_uploads += uploads
            self.counted = True
        return tensors

    def _ints_as_tensors(self, args) -> tuple:
        """Note [ints that change every call] (_fx_state.py): each int input as a 0-dim i64
        tensor on the partition's device."""
        args = list(args)
        for i in self.imported.int_inputs:
            args[i] = torch.tensor(args[i], dtype=torch.int64, device=self.device)
        return tuple(args)

    def __call__(self, *given):
        args = self._ints_as_tensors(given) if self.imported.int_inputs else given
        addressed = self._pointers(args)
        # PyTorch's run gets the arguments as dynamo gave them (ints as ints: Note [ints that
        # change every call]).
        before = [a.clone() if isinstance(a, torch.Tensor) else a for a in given] \
            if self.verify is not None else None
        results = self._empty_outputs()
        try:
            if addressed is not None:
                pointers, _dense = addressed  # _dense: alive until the run is enqueued
                self.session.run_pointers(pointers, [r.data_ptr() for r in results],
                                          cuda_device=self.cuda_index, stream=self._stream())
                self.pointer_calls += 1
            else:
                self.session.run_into(self._checked_inputs(args), results, stream=self._stream())
                self.checked_calls += 1
        except symmflow.Error:
            raise
        except BaseException as e:
            self.rank.abort(f"{type(e).__name__}: {e}")
            raise
        outs = self.imported.assemble_outputs(given, results)
        if self.strides:
            outs = self._restride(outs)
        if self.verify is not None:
            _verify(self, before, given, outs)
        return outs[0] if self.single_output else outs


def _overlaps(shape, stride) -> bool:
    """Whether two elements of a tensor of this shape and these strides share memory (an
    expand's stride 0, or any stride smaller than the span of the dimensions inside it)."""
    span = 1  # the elements the dimensions of smaller stride span
    for s, n in sorted((s, n) for n, s in zip(shape, stride) if n > 1):
        if s < span:
            return True
        span += s * (n - 1)
    return False


def _laid_out(t: torch.Tensor, stride: tuple) -> torch.Tensor:
    """t's values in a tensor of the given strides. Strides that overlap (the forward returned an
    expand: batch-2 training on GPUs did) get a storage holding each element once, written through
    every element's index: elements that share memory hold equal values (t is that expand's
    result), so whichever write lands is the value; copy_ refuses such a destination."""
    if not _overlaps(t.shape, stride):
        laid = torch.empty_strided(t.shape, stride, dtype=t.dtype, device=t.device)
        return laid.copy_(t)
    size = 1 + sum((n - 1) * s for n, s in zip(t.shape, stride)) if t.numel() else 0
    storage = torch.empty(size, dtype=t.dtype, device=t.device)
    index = torch.zeros((), dtype=torch.long, device=t.device)
    for n, s in zip(t.shape, stride):
        index = index.unsqueeze(-1) + torch.arange(n, device=t.device) * s
    storage[index.reshape(-1)] = t.reshape(-1)
    return storage.as_strided(t.shape, stride)


def _verify(runner, before, args, outs) -> None:
    """PyTorch's run of the partition on copies of the inputs as they were before the call:
    equal outputs, and equal inputs after, the ones the program writes back (a KV cache: Note
    [the KV cache in place]) as PyTorch wrote them, every other one unchanged."""
    name = runner.verify.meta["symmflow_name"]
    inputs = [b.clone() if isinstance(b, torch.Tensor) else b for b in before]
    want = runner.verify(*inputs)
    want = [want] if not isinstance(want, (tuple, list)) else list(want)
    written = set(runner.imported.written_inputs)
    for i, (b, a) in enumerate(zip(before, args)):
        if not isinstance(b, torch.Tensor):
            continue
        if i in written:
            _check_close(inputs[i], a, f"input {i} of {name} as written back")
        elif not torch.equal(b, a):
            raise symmflow.Error(f"SYMMFLOW_TORCH_VERIFY: input {i} of {name} was changed")
    for i, (w, g) in enumerate(zip(want, outs)):
        if isinstance(w, torch.Tensor):
            _check_close(w, g, f"output {i} of {name}")


def _check_close(w: torch.Tensor, g: torch.Tensor, what: str) -> None:
    err = (w.double() - g.double()).abs().max().item() if w.numel() and w.shape == g.shape \
        else 0.0
    scale = max(w.double().abs().max().item() if w.numel() else 0.0, 1.0)
    tol = 2e-2 if w.dtype in (torch.bfloat16, torch.float16) else 1e-4
    if not err <= tol * scale or w.shape != g.shape:
        raise symmflow.Error(f"SYMMFLOW_TORCH_VERIFY: {what} differs from PyTorch's: max error "
                             f"{err}, shapes {tuple(w.shape)} {tuple(g.shape)}")
