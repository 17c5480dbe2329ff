"""Store callbacks for ``symmflow.init_store`` from a ``torch.distributed.Store`` (TCPStore,
FileStore, ...), without importing torch: any object with ``set``, ``get``, ``check(keys)``,
``wait(keys, timedelta)`` and ``add`` as c10d stores have works.
"""
from __future__ import annotations

import datetime
from typing import Any, Callable


def store_callbacks(store: Any) -> dict[str, Callable[..., Any]]:
    """The four callbacks of ``init_store`` over a c10d-like store: ``init_store(**cb, rank=..,
    world_size=..)``. A c10d wait that times out raises; here it answers False / None."""

    def wait(keys: list, timeout_s: float) -> bool:
        keys = list(keys)
        if store.check(keys):  # non-blocking; c10d's wait uses its timeout for the socket too
            return True
        if timeout_s <= 0:
            return False
        try:
            store.wait(keys, datetime.timedelta(seconds=timeout_s))
            return True
        except Exception as e:  # c10d raises DistStoreError (a RuntimeError) on timeout
            if "timeout" in str(e).lower() or "timed out" in str(e).lower():
                return store.check(keys)
            raise

    def get(key: str, timeout_s: float) -> Any:
        if not wait([key], timeout_s):
            return None
        return bytes(store.get(key))

    def set_(key: str, value: bytes) -> None:
        store.set(key, value)

    def add(key: str, delta: int) -> int:
        return int(store.add(key, delta))

    return {"set": set_, "get": get, "wait": wait, "add": add}
