"""Run one function over many items that share one large input (a trace): here, on a pool of
processes, or on the workers of a running Dask cluster. Results come back in item order, so a
computation gives the same answer wherever its parts ran.

The shared input travels once per worker (a process pool's initializer; Dask's broadcast
scatter), never once per item.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

_SHARED: dict[str, Any] = {}


def _init(fn: Callable[[Any, Any], Any], shared: Any) -> None:
    _SHARED["fn"], _SHARED["shared"] = fn, shared


def _call(item: Any) -> Any:
    return _SHARED["fn"](_SHARED["shared"], item)


def fan_out(
    fn: Callable[[Any, Any], Any],
    shared: Any,
    items: Sequence[Any],
    *,
    workers: int | None = None,
    dask_address: str | None = None,
) -> list[Any]:
    """``[fn(shared, item) for item in items]``, in parallel: on the Dask cluster at
    ``dask_address``, else on ``workers`` processes (default: one per core; 1: in this process).
    ``fn`` must be a module-level function, so that workers can import it."""
    if dask_address:
        from distributed import Client

        with Client(dask_address) as client:
            [remote] = client.scatter([shared], broadcast=True)
            futures = client.map(fn, [remote] * len(items), list(items), pure=False)
            return client.gather(futures)
    workers = workers or os.cpu_count() or 1
    if workers == 1 or len(items) <= 1:
        return [fn(shared, item) for item in items]
    with ProcessPoolExecutor(
        max_workers=min(workers, len(items)), initializer=_init, initargs=(fn, shared)
    ) as pool:
        return list(pool.map(_call, items))
