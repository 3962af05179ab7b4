"""Forked workers that share this process's memory and survive each other's death.

Each worker is a child forked from this process, so it reads the parent's arrays (a trace of
gigabytes) page by page, copy-on-write, never a copy. Python's garbage collector is frozen
across the fork (``gc.freeze``): a collection in a child would otherwise write to every object
it visits and so copy the pages they sit on.

Each worker has a pipe of its own: the parent sends it one item at a time and reads its
result. No lock or queue is shared between workers, so a worker killed at any instant (the
kernel's out-of-memory killer, a signal) cannot leave another blocked, which the standard
library's process pool can (its workers share one queue and its lock). The parent watches every
worker's pipe and its process at once; when a worker dies, its item runs again on a freshly
forked worker, and the pool runs one worker fewer from then on (a death from memory is likely
to recur while as many tasks run beside it). An item whose worker dies twice ends the call
with :func:`resources.worker_lost`. Workers ask the kernel to kill them, not the parent, when
memory runs out (``oom_score_adj``), so the process that holds the results and the warehouse
is the last one to go.

An error an item raises in a worker (a user's bad input, a bug) is raised again here, as it
was, and every worker is ended first: nothing waits forever.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import pickle
import signal
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from multiprocessing.connection import Connection, wait
from typing import Any

from prefixscope import resources

#: How many times an item may lose its worker before the call gives up.
RETRIES = 1
#: Seconds a worker has to exit once told to stop, before it is killed.
EXIT_GRACE_S = 5.0


class _Worker:
    def __init__(self, fn: Callable[[Any, Any], Any], shared: Any) -> None:
        ctx = multiprocessing.get_context("fork")
        self.conn, child = ctx.Pipe(duplex=True)
        self.process = ctx.Process(target=_serve, args=(child, fn, shared), daemon=True)
        self.process.start()
        child.close()
        self.item: int | None = None

    def send(self, index: int, item: Any) -> bool:
        """Hand the worker item ``index``; False when its pipe is broken (it has died)."""
        try:
            self.conn.send((index, item))
        except OSError:
            return False
        self.item = index
        return True

    def stop(self) -> None:
        with suppress(OSError):
            self.conn.send(None)
        self.process.join(EXIT_GRACE_S)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(EXIT_GRACE_S)
        self.conn.close()


class Pool:
    """Forked workers of one function and one shared input, alive until :meth:`close`: a
    stage that fans out in rounds (the SLO search) keeps them, and what they hold, from one
    round to the next (:func:`session`)."""

    def __init__(self, fn: Callable[[Any, Any], Any], shared: Any, workers: int) -> None:
        self.fn, self.shared = fn, shared
        self.width = max(1, workers)
        self.workers: list[_Worker] = []

    def map(self, items: Sequence[Any]) -> list[Any]:
        """``[fn(shared, item) for item in items]``, in item order (the module docstring says
        what happens when a worker dies)."""
        results: list[Any] = [None] * len(items)
        pending = deque(range(len(items)))
        lost = [0] * len(items)
        done = 0
        width = max(1, min(self.width, len(items)))
        pool = self.workers
        while done < len(items):
            while pending and sum(w.item is not None for w in pool) < width:
                idle = next((w for w in pool if w.item is None), None)
                if idle is None:
                    idle = self._start()
                i = pending.popleft()
                if not idle.send(i, items[i]):  # it died between tasks: its item never left
                    pending.appendleft(i)
                    pool.remove(idle)
                    idle.stop()
            busy = [w for w in pool if w.item is not None]
            ready = wait([w.conn for w in busy] + [w.process.sentinel for w in busy])
            for w in busy:
                if w.conn not in ready and w.process.sentinel not in ready:
                    continue
                got = _receive(w) if w.conn in ready else None
                if got is not None:
                    i, ok, value = got
                    if not ok:
                        raise value
                    results[i] = value
                    w.item = None
                    done += 1
                    if not w.process.is_alive():  # it died after it answered
                        pool.remove(w)
                        w.stop()
                    continue
                # the worker died with its item: run it again on a fresh one, one worker fewer
                i = w.item
                assert i is not None
                w.process.join(EXIT_GRACE_S)
                how = _how(w.process.exitcode)
                pool.remove(w)
                w.item = None
                w.stop()
                lost[i] += 1
                if lost[i] > RETRIES:
                    raise resources.worker_lost(how)
                width = self.width = max(1, width - 1)
                pending.appendleft(i)
                where = resources.stage()
                resources.say(
                    f"prefixscope: {where + ': ' if where else ''}a worker process was lost "
                    f"({how}); its task runs again on a fresh one, with {width} worker"
                    f"{'s' if width > 1 else ''} from now on"
                )
        return results

    def _start(self) -> _Worker:
        gc.collect()
        gc.freeze()  # the objects so far: a collection in the child would copy their pages
        try:
            worker = _Worker(self.fn, self.shared)
        finally:
            gc.unfreeze()
        self.workers.append(worker)
        return worker

    def close(self) -> None:
        for w in self.workers:
            w.stop()
        self.workers = []


#: The pools a :func:`session` keeps, by (function, shared input): None outside one.
_SESSION: dict[tuple[int, int], Pool] | None = None


@contextmanager
def session() -> Iterator[None]:
    """Within the block, a call of :func:`forked` with the same function and the same shared
    object (the same object, not an equal one) reuses the workers of the call before; all of
    them are stopped after it."""
    global _SESSION
    outer = _SESSION
    if outer is None:
        _SESSION = {}
    try:
        yield
    finally:
        if outer is None:
            pools, _SESSION = _SESSION or {}, None
            for pool in pools.values():
                pool.close()


def forked(
    fn: Callable[[Any, Any], Any], shared: Any, items: Sequence[Any], workers: int
) -> list[Any]:
    """``[fn(shared, item) for item in items]`` on ``workers`` forked processes, in item order
    (the module docstring says what happens when one dies); inside a :func:`session`, on the
    workers it keeps for ``fn`` and ``shared``."""
    if _SESSION is None:
        pool = Pool(fn, shared, workers)
        try:
            return pool.map(items)
        finally:
            pool.close()
    key = (id(fn), id(shared))
    pool = _SESSION.get(key)
    if pool is None or pool.fn is not fn or pool.shared is not shared:
        for old in list(_SESSION.values()):  # another input: the old workers hold a stale one
            old.close()
        _SESSION.clear()
        pool = _SESSION[key] = Pool(fn, shared, workers)
    try:
        return pool.map(items)
    except BaseException:
        pool.close()
        _SESSION.pop(key, None)
        raise


def _receive(w: _Worker) -> tuple[int, bool, Any] | None:
    """The worker's answer, or None when its pipe broke (it died)."""
    try:
        return w.conn.recv()
    except (EOFError, OSError):
        return None


def _how(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        if -exitcode == signal.SIGKILL:
            return f"killed by {name}, as the kernel kills a process when memory runs out"
        return f"killed by {name}"
    return f"it exited with status {exitcode}"


def _serve(conn: Connection, fn: Callable[[Any, Any], Any], shared: Any) -> None:
    """A worker: items in, results out, until told to stop or its pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    _prefer_to_be_killed()
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            break
        if message is None:
            break
        index, item = message
        try:
            answer = (index, True, fn(shared, item))
        except BaseException as exc:  # raised again in the parent
            answer = (index, False, _portable(exc))
        try:
            conn.send(answer)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            conn.send((index, False, RuntimeError(f"a result could not be sent back: {exc}")))
        del answer
        resources.give_back_heap()  # a task's peak is not carried into the next one
    conn.close()


def _portable(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling, else a RuntimeError with its words."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def _prefer_to_be_killed() -> None:
    """Raise this process's out-of-memory score, so that the kernel picks a worker before the
    parent. Raising it needs no privilege; where the file cannot be written, nothing changes."""
    try:
        with open(f"/proc/{os.getpid()}/oom_score_adj", "w") as f:
            f.write("500")
    except OSError:
        pass
