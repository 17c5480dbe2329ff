"""Store callbacks for ``symmflow.init_store`` from a ``torch.distributed.Store`` (TCPStore,
FileStore, ...), without importing torch: any object with ``set``, ``get``, ``check(keys)``
and ``add`` as c10d stores have works.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable

# Note [leaving through a dead store]: symmflow leaves its world at interpreter exit, which
# writes to the store. By then the store may be gone: a test fixture (or a script) destroyed the
# process group and deleted a FileStore's directory, and c10d's FileStore then retries the write
# for its whole timeout (300 s: every pytest file of ours lingered 5 minutes after passing, in
# CTest). At exit each write is best effort: it runs on a daemon thread given EXIT_WAIT_S.
EXIT_WAIT_S = 2.0
_exiting = False


def exiting() -> None:
    """Called at interpreter exit, before symmflow leaves its world."""
    global _exiting
    _exiting = True


def _bounded(call: Callable[[], Any]) -> Any:
    if not _exiting:
        return call()
    result: list = []
    worker = threading.Thread(target=lambda: result.append(call()), daemon=True)
    worker.start()
    worker.join(EXIT_WAIT_S)
    return result[0] if result else None


def store_callbacks(store: Any) -> dict[str, Callable[..., Any]]:
    """The four callbacks of ``init_store`` over a c10d-like store: ``init_store(**cb, rank=..,
    world_size=..)``. Waits poll ``check`` (at most 20 ms apart) and answer False / None when
    the timeout passes, as init_store expects."""

    def wait(keys: list, timeout_s: float) -> bool:
        # Polls check() (non-blocking): c10d's wait() uses its timeout for the socket too, so the
        # short waits symmflow makes would time out (and log) even for keys that are set.
        keys = list(keys)
        deadline = time.monotonic() + max(timeout_s, 0.0)
        pause = 0.0005
        while True:
            if store.check(keys):
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(pause, left))
            pause = min(pause * 2, 0.02)

    def get(key: str, timeout_s: float) -> Any:
        if not wait([key], timeout_s):
            return None
        return bytes(store.get(key))

    def set_(key: str, value: bytes) -> None:
        _bounded(lambda: store.set(key, value))  # Note [leaving through a dead store]

    def add(key: str, delta: int) -> int:
        got = _bounded(lambda: store.add(key, delta))
        return int(got) if got is not None else 0

    return {"set": set_, "get": get, "wait": wait, "add": add}
