"""A warm start: the caches begin a run holding what a real engine held, not empty.

A cold start counts every block's first sight as a miss until the cache fills, which lowers
the early hit rate of every run (and of a short trace, all of it). Two warm starts, each
replayed through the caches and then discarded, so every table measures the same requests a
cold run of the trace would:

- ``first-window:SECONDS``: the trace's own first SECONDS of traffic (the requests before it
  are replayed, never measured: the tables then cover the rest);
- ``events``: the engine's cache at the trace's first arrival, from its captured KV events
  (``kv_events``, ``validate/events.engine_cache``; a capture that begins with the engine's
  snapshot holds its whole cache):
  one request of one block per held block, in the order the engine stored them, oldest first,
  all well before the trace (:data:`LEAD_S`). A block the events name without a prefixscope
  id (a chain begun before the capture) is a block of its own that no request ever hits: it
  takes its room.

``Warmed`` is the replayed trace and how many of its first requests are the warm-up;
``measured`` is the rest, the trace the tables are made of.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa

from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.tail import tail

SOURCES = ("cold", "first-window", "events")
#: How long before the first arrival the warm-up requests of ``events`` arrive: long enough
#: for a fleet's replicas to prefill them all before the trace starts (10⁷ s, four months:
#: ten million blocks of 512 tokens at 500,000 tokens a second, at ×1 load).
LEAD_S = 1e7


@dataclass(frozen=True)
class WarmStart:
    """Where a run's caches start: empty (``cold``), after the trace's first ``seconds``
    (``first-window``), or as the captured KV events left the engine (``events``)."""

    source: str = "cold"
    seconds: float = 0.0

    def check(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"unknown warm start {self.source!r}; known: {', '.join(SOURCES)}")
        if self.source == "first-window" and not (
            math.isfinite(self.seconds) and self.seconds > 0
        ):
            raise ValueError(f"a first window is seconds above 0, got {self.seconds}")

    @property
    def label(self) -> str:
        """As the tables name it: ``cold``, ``first-window:600s`` or ``events``."""
        if self.source == "first-window":
            return f"first-window:{self.seconds:g}s"
        return self.source

    @property
    def cold(self) -> bool:
        return self.source == "cold"


def parse_warm_start(text: str) -> WarmStart:
    """``cold``, ``events`` or ``first-window:SECONDS``."""
    source, _, rest = text.strip().partition(":")
    if source == "first-window":
        try:
            seconds = float(rest)
        except ValueError:
            raise ValueError(f"expected first-window:SECONDS, got {text!r}") from None
        start = WarmStart(source, seconds)
    elif rest:
        raise ValueError(f"{source} takes no argument, got {text!r}")
    else:
        start = WarmStart(source)
    start.check()
    return start


@dataclass(frozen=True, eq=False)
class Warmed:
    """The trace a run replays (its first ``n_warm`` requests the warm-up) and the warm start
    it came from."""

    trace: Trace
    n_warm: int
    start: WarmStart

    @property
    def dropped(self) -> int:
        """The logged requests the warm-up took (its first window's); 0 when it came from
        elsewhere (the events' requests are not the log's)."""
        return self.n_warm if self.start.source == "first-window" else 0

    @cached_property
    def measured(self) -> Trace:
        """The requests the tables are made of, with their own dense ids and times."""
        return tail(self.trace, self.n_warm)


def cold(trace: Trace) -> Warmed:
    return Warmed(trace, 0, WarmStart())


def first_window(trace: Trace, seconds: float) -> Warmed:
    """The requests that arrive in the trace's first ``seconds`` are the warm-up."""
    start = WarmStart("first-window", seconds)
    start.check()
    n = int(np.searchsorted(trace.times, seconds, side="left"))
    if n >= trace.n_requests:
        raise ValueError(
            f"the first {seconds:g} s hold every request of the trace "
            f"({trace.times[-1]:.0f} s long): nothing would be left to measure"
        )
    return Warmed(trace, n, start)


def with_blocks(trace: Trace, hashes: np.ndarray) -> Warmed:
    """``trace`` after one single-block request per hash of ``hashes`` (uint64, oldest first),
    all arriving :data:`LEAD_S` before it. A hash the trace names is its block; another is a new
    id. Each block keeps the trace's parent (a new one has none)."""
    hashes = np.asarray(hashes, np.uint64)
    m = len(hashes)
    order = np.argsort(trace.hashes, kind="stable")
    pos = np.searchsorted(trace.hashes, hashes, sorter=order)
    pos = np.minimum(pos, max(trace.n_unique - 1, 0))
    known = trace.n_unique > 0
    found = known & (trace.hashes[order[pos]] == hashes) if m and known else np.zeros(m, bool)
    new_hashes, new_index = np.unique(hashes[~found], return_inverse=True)
    ids = np.empty(m, np.int32)
    ids[found] = order[pos[found]]
    ids[~found] = trace.n_unique + new_index.astype(np.int32)
    rule = trace.last_token_rule
    warm = Trace(
        block_size=trace.block_size,
        offsets=np.concatenate([np.arange(m, dtype=np.int64), trace.offsets + m]),
        blocks=np.concatenate([ids, trace.blocks]),
        input_tokens=np.concatenate(
            [np.full(m, trace.block_size, np.int64), trace.input_tokens]
        ),
        tenant_codes=np.concatenate([np.zeros(m, np.int32), trace.tenant_codes]),
        tenants=trace.tenants,
        n_unique=trace.n_unique + len(new_hashes),
        times=np.concatenate([np.full(m, -LEAD_S), trace.times]),
        hashes=np.concatenate([trace.hashes, new_hashes]),
        request_ids=None
        if trace.request_ids is None
        else pa.concat_arrays([pa.nulls(m, pa.string()), trace.request_ids.cast(pa.string())]),
        start_s=trace.start_s,
        last_token_rule=None if rule is None else np.concatenate([np.zeros(m, bool), rule]),
        sessions=None
        if trace.sessions is None
        else np.concatenate([np.full(m, -1, np.int32), trace.sessions]),
    )
    parent = np.full(warm.n_unique, -1, np.int32)
    parent[: trace.n_unique] = trace.parent
    warm.__dict__["parent"] = parent  # the chains' own, not the warm-up's single blocks
    return Warmed(warm, m, WarmStart("events"))
