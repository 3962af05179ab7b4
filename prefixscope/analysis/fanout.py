"""Run one function over many items that share one large input (a trace): here, on a pool of
processes, or on the workers of a running Dask cluster. Results come back in item order, so a
computation gives the same answer wherever its parts ran.

The shared input travels once per worker, never once per item: here the workers are forked
(``forked.py``), so they share the parent's copy of it page by page, copy-on-write; on a
cluster, Dask's broadcast scatter. A trace's derived arrays are computed before the workers
fork (``Trace.warm``), so the workers share those too rather than each building its own.

A worker that dies (killed for memory, or by a signal) costs no result: its task runs again
on a fresh worker, with one worker fewer from then on; a task that loses its worker twice ends
the command with one line (``resources.worker_lost``), as a task that kills every Dask worker
it lands on does (``KilledWorker``).

On a cluster it travels once per *process of ours*, too: the client
and what it scattered are kept for the life of this process, keyed by the content's token
(``dask.base.tokenize``), so the flow's stages, each of which loads the trace again from the
warehouse, find it already on the workers. A tuple of shared parts is scattered part by part,
so a stage that shares ``(trace, traffic)`` reuses the trace another stage sent.
"""

from __future__ import annotations

import atexit
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import Any

from prefixscope import resources
from prefixscope.analysis.forked import forked

#: Open clients, by scheduler address.
_CLIENTS: dict[str, Any] = {}
#: Scattered parts, by (address, token), most recently used last. Held futures keep their data
#: on the workers; beyond this many the oldest are released.
_SCATTERED: OrderedDict[tuple[str, str], Any] = OrderedDict()
KEEP_SCATTERED = 4


#: How long a command waits for a Dask scheduler to answer, in seconds, before it stops with
#: one line. A scheduler on the same network answers within one.
CONNECT_TIMEOUT_S = 10.0
#: A Dask scheduler's address: an optional scheme, a host name or IP (IPv6 in brackets), a port.
_ADDRESS = re.compile(
    r"(?:(tcp|tls|ucx|ws|wss)://)?"
    r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?)"
    r":([0-9]{1,5})"
)


def check_address(address: str) -> str:
    """``[SCHEME://]HOST:PORT`` as a scheduler's address (tcp:// when no scheme is given);
    ValueError otherwise. Checked before a client is made: a client that fails to parse its
    address is left half-built, and prints a traceback when it is collected."""
    word = address.strip()
    match = _ADDRESS.fullmatch(word)
    if match is None or not 1 <= int(match[3]) <= 65_535:
        raise ValueError(
            f"expected a Dask scheduler's address tcp://HOST:PORT (e.g. tcp://127.0.0.1:8786), "
            f"got {address[:80]!r}"
        )
    return word if match[1] else f"tcp://{word}"


def client_for(address: str) -> Any:
    """This process's client of the cluster at ``address`` (opened once, closed at exit). A
    scheduler that does not answer within ``CONNECT_TIMEOUT_S`` is a ValueError (one line),
    whether nothing listens there or something that is not a scheduler does."""
    client = _CLIENTS.get(address)
    if client is None or client.status != "running":
        if not address.startswith("inproc://"):  # an in-process cluster's (tests)
            check_address(address)
        client = _connect(address)
        _CLIENTS[address] = client
        atexit.register(_close, address)
    return client


def _connect(address: str) -> Any:
    """A client of ``address``, made on a thread that is given up on after the timeout (and
    a little): distributed bounds the connection but not always the handshake that follows
    (a port held by another service never answers it)."""
    from distributed import Client

    made: dict[str, Any] = {}

    def connect() -> None:
        try:
            # the connection's own bound leaves the handshake's grace inside the stated time
            made["client"] = Client(address, set_as_default=False, timeout=CONNECT_TIMEOUT_S - 2)
        except Exception as exc:  # reported below, on the caller's thread
            made["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"

    thread = threading.Thread(target=connect, name="dask-connect", daemon=True)
    thread.start()
    thread.join(CONNECT_TIMEOUT_S)
    if "client" in made:
        return made["client"]
    why = made.get("error", "no answer")
    raise ValueError(
        f"no Dask scheduler answered at {address} within {CONNECT_TIMEOUT_S:g} s ({why}) — "
        "start one (`dask scheduler`) or check --dask-address"
    )


def close_clients() -> None:
    """Close every client this process opened (and release what they scattered): before the
    cluster goes away, so that nothing tries to reach it after."""
    for address in list(_CLIENTS):
        _close(address)


def _close(address: str) -> None:
    for key in [k for k in _SCATTERED if k[0] == address]:
        del _SCATTERED[key]
    client = _CLIENTS.pop(address, None)
    if client is not None:
        client.close()


def scattered(address: str, part: Any) -> Any:
    """A future of ``part`` on every worker of the cluster at ``address``: sent the first time
    this content is asked for, found again after."""
    from dask.base import tokenize

    key = (address, tokenize(part))
    future = _SCATTERED.get(key)
    if future is not None and future.status == "finished":
        _SCATTERED.move_to_end(key)
        return future
    [future] = client_for(address).scatter([part], broadcast=True, hash=False)
    _SCATTERED[key] = future
    while len(_SCATTERED) > KEEP_SCATTERED:
        _SCATTERED.popitem(last=False)[1].release()
    return future


def on_every_worker(dask_address: str, fn: Callable[[], Any]) -> None:
    """Run ``fn`` on every worker of the cluster at ``dask_address`` (to let go what a stage
    kept there); a cluster that no longer answers is left as it is."""
    with suppress(Exception):  # the stage's own outcome is what the user hears about
        client_for(dask_address).run(fn)


def width(*, workers: int | None = None, dask_address: str | None = None) -> int:
    """How many items run at once: the cluster's threads, else ``workers`` (default: one per
    core)."""
    if dask_address:
        return max(1, sum(client_for(dask_address).nthreads().values()))
    return workers or os.cpu_count() or 1


def fan_out(
    fn: Callable[[Any, Any], Any],
    shared: Any,
    items: Sequence[Any],
    *,
    workers: int | None = None,
    dask_address: str | None = None,
    weights: Sequence[float] | None = None,
    memory: Sequence[int] | None = None,
) -> list[Any]:
    """``[fn(shared, item) for item in items]``, in parallel: on the Dask cluster at
    ``dask_address``, else on ``workers`` processes (default: one per core; 1: in this process).
    ``weights``: each item's expected cost; items are handed out heaviest first, so that no
    worker is left with a long one at the end (results still come back in item order).
    ``memory``: what each item holds at most, in bytes: fewer workers run where the machine
    cannot hold that many items at once (:func:`fitting_workers`).
    ``fn`` must be a module-level function, so that workers can import it."""
    order = list(range(len(items)))
    if weights is not None:
        order.sort(key=lambda i: -weights[i])
    if dask_address is None and memory is not None and items:
        workers = fitting_workers(workers or os.cpu_count() or 1, max(memory), len(items))
    done = _run([items[i] for i in order], fn, shared, workers, dask_address)
    results: list[Any] = [None] * len(items)
    for i, result in zip(order, done, strict=True):
        results[i] = result
    return results


#: The share of the memory available when a fan-out starts that its workers may fill: the rest
#: is for this process's own results and the page cache.
MEMORY_SHARE = 0.8


def fitting_workers(workers: int, item_bytes: int, items: int) -> int:
    """``workers``, or fewer where the memory available now cannot hold that many items at
    once (at least one); says so in one line when it runs fewer."""
    wanted = min(workers, items)
    if wanted <= 1:
        return wanted
    room = int(resources.available_bytes() * MEMORY_SHARE)
    fit = max(1, room // max(item_bytes, 1))
    if fit >= wanted:
        return workers
    where = resources.stage()
    resources.say(
        f"prefixscope: {where + ': ' if where else ''}{fit} worker{'s' if fit > 1 else ''} "
        f"instead of {wanted}: a task holds up to {item_bytes / resources.GIB:.1f} GiB and "
        f"{room / resources.GIB:.1f} GiB is free for them"
    )
    return fit


def _run(
    items: list[Any],
    fn: Callable[[Any, Any], Any],
    shared: Any,
    workers: int | None,
    dask_address: str | None,
) -> list[Any]:
    if dask_address:
        client = client_for(dask_address)
        if isinstance(shared, tuple):
            remote: Any = tuple(scattered(dask_address, part) for part in shared)
        else:
            remote = scattered(dask_address, shared)
        futures = client.map(fn, [remote] * len(items), items, pure=False)
        try:
            return client.gather(futures)
        except Exception as exc:
            # a task that killed each worker it ran on (``KilledWorker``), or a worker gone
            # with the parts scattered to it, which its tasks then lose (``CancelledError``:
            # "already forgotten"); either way what was scattered is gone with it
            if type(exc).__name__ in ("KilledWorker", "FutureCancelledError", "CancelledError"):
                _forget(dask_address)
                raise _cluster_lost(dask_address, exc) from None
            raise
    workers = workers or os.cpu_count() or 1
    if workers == 1 or len(items) <= 1:
        return [fn(shared, item) for item in items]
    for part in shared if isinstance(shared, tuple) else (shared,):
        if hasattr(part, "warm"):
            part.warm()
    return forked(fn, shared, items, min(workers, len(items)))


def _forget(address: str) -> None:
    """Drop what was scattered to the cluster at ``address``: a later fan-out sends it again."""
    for key in [k for k in _SCATTERED if k[0] == address]:
        with suppress(Exception):
            _SCATTERED.pop(key).release()


def _cluster_lost(address: str, exc: BaseException) -> resources.ResourceError:
    where = resources.stage()
    name = f"the {where} stage" if where else "a fan-out"
    return resources.ResourceError(
        f"{name} lost the Dask workers at {address} that ran one of its tasks, or held what it "
        f"sent them ({' '.join(str(exc).split())[:160]}) — give the workers more memory (dask "
        "worker --memory-limit), or run less of the trace at once"
    )
