"""Store callbacks for ``symmflow.init_store`` from a ``torch.distributed.Store`` (TCPStore,
FileStore, ...), without importing torch: any object with ``set``, ``get``, ``check(keys)``
and ``add`` as c10d stores have works.
"""
from __future__ import annotations

import time
from typing import Any, Callable


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
        store.set(key, value)

    def add(key: str, delta: int) -> int:
        return int(store.add(key, delta))

    return {"set": set_, "get": get, "wait": wait, "add": add}
