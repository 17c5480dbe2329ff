"""symmflow from Python: compile distributed tensor programs, explain their plans and run them.

Plain Python (numpy, no torch needed)::

    import symmflow
    c = symmflow.compile(text, world_size=2)        # ProgramError: file:line:col diagnostics
    c.explain()                                     # dict: the JSON of `symmflow explain --json`
    outs = symmflow.run(c, [[x0, w0], [x1, w1]])    # a world of threads; numpy arrays per rank

A process world (torchrun, multiprocessing) joins through a key-value store given as four
callbacks (``init_store``; ``store_callbacks`` wraps a ``torch.distributed.Store``); a
``Session`` then binds a compiled program to the rank. Tensors cross as DLPack, without copies:
inputs may be any DLPack object (numpy arrays, torch tensors), outputs are DLPack-exportable
arrays (``torch.from_dlpack``, ``numpy.from_dlpack``). Strided inputs are handled; negative
strides and dtypes symmflow lacks are refused naming the argument. Every C++ error is a
``symmflow.Error`` (``InvalidUsage``, ``Timeout``, ``PeerFailure``, ``ProgramError``) whose text
is the C++ message. ``tunables()`` is the table of timeouts and thresholds (``symmflow env``),
whose defaults are defined once, in C++.
"""
from __future__ import annotations

import atexit
import sys
from typing import Any, Callable, Optional

from ._errors import Error, InvalidUsage, PeerFailure, ProgramError, Timeout
from ._types import TensorSpec
from . import _core
from ._core import (CompiledProgram, Program, Rank, Session, call_op, check_device, compile,
                    empty_symmetric, kernel_choices, ops, reset_step_profile, run, step_profile,
                    symmetric_group, tunables)
from . import _store
from ._store import store_callbacks

__version__: str = _core.__version__

__all__ = [
    "CompiledProgram", "Error", "InvalidUsage", "PeerFailure", "Program", "ProgramError", "Rank",
    "Session", "TensorSpec", "Timeout", "__version__", "call_op", "compile", "empty_symmetric",
    "check_device", "init_store", "kernel_choices", "ops", "reset_step_profile", "run",
    "step_profile", "store_callbacks", "symmetric_group", "tunables",
]

_store_rank: Optional[Rank] = None


def init_store(set: Callable[[str, bytes], None],
               get: Callable[[str, float], Optional[bytes]],
               wait: Callable[[list, float], bool],
               add: Callable[[str, int], int],
               rank: int, world_size: int, prefix: str = "symmflow",
               timeout_s: float = -1) -> Rank:
    """Joins this process to a world of ``world_size`` processes meeting through a store.

    Collective: returns once every rank joined (``Timeout`` naming the missing ranks otherwise).
    Callbacks: ``set(key, value: bytes)``; ``get(key, timeout_s) -> bytes | None`` (None on
    timeout); ``wait(keys, timeout_s) -> bool``; ``add(key, delta) -> int``. They may be called
    from symmflow's threads (the GIL is taken for them). One world per process: a second call
    with the same rank, size and prefix returns the same world. ``timeout_s`` bounds every wait
    (<0: the SYMMFLOW_TIMEOUT_S tunable). The world is left at interpreter exit (a call after
    that, e.g. from an earlier-registered atexit handler, raises InvalidUsage "symmflow has shut
    down"), and an uncaught exception first marks it failed, so peers raise PeerFailure naming
    this rank. A call that failed may be retried by the same process.
    """
    global _store_rank
    first = _store_rank is None
    r = _core.init_store(set, get, wait, add, rank, world_size, prefix, float(timeout_s))
    if first:
        _store_rank = r
        atexit.register(_core._shutdown_store)
        atexit.register(_store.exiting)  # runs first (atexit is LIFO)
        previous_hook = sys.excepthook

        def abort_on_uncaught(kind: Any, value: Any, tb: Any) -> None:
            try:
                r.abort(f"uncaught {kind.__name__}: {value}")
            finally:
                previous_hook(kind, value, tb)

        sys.excepthook = abort_on_uncaught
    return r
