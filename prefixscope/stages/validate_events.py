"""Stage ``validate --events``: a simulated pool per engine rank beside the engine's KV cache
events → ``validation_events`` (every capacity scanned) and ``validation_event_windows`` (the
best capacity, window by window). docs/validate.md says what a disagreement means."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from prefixscope import sql, warehouse
from prefixscope.analysis.validate.events import (
    CLEARED_KIND,
    REMOVED_KIND,
    STORED_KIND,
    Agreement,
    EngineStream,
    attribute_ranks,
    scan,
    window_ends,
)
from prefixscope.analysis.validate.pool import POOL_MODELS, PoolRequests, ServiceModel

KINDS = {"stored": STORED_KIND, "removed": REMOVED_KIND, "cleared": CLEARED_KIND}


@dataclass(frozen=True)
class EventValidateSettings:
    """``model``: the pool model (:data:`POOL_MODELS`); ``windows``: time windows over the
    engine's span; ``capacities``: the capacities to scan (empty: a grid from the engine's
    peak); ``tpot_ms`` / ``prefill_tokens_per_s``: the service-time model."""

    model: str = "vllm"
    windows: int = 20
    capacities: tuple[int, ...] = ()
    tpot_ms: float = 20.0
    prefill_tokens_per_s: float = 10_000.0

    def check(self) -> None:
        if self.model not in POOL_MODELS:
            raise ValueError(
                f"unknown pool model {self.model!r} — give one of {', '.join(POOL_MODELS)}"
            )
        if self.windows < 1 or any(c < 1 for c in self.capacities):
            raise ValueError("--event-windows and --capacity-blocks must be positive")


@dataclass(frozen=True)
class RankResult:
    rank: int
    requests: int
    peak: int
    unlinked: int
    best: Agreement
    scanned: list[Agreement] = field(default_factory=list)


def load_requests(con: duckdb.DuckDBPyConnection) -> PoolRequests:
    t = con.sql(sql.load("validate/event_requests")).to_arrow_table()
    if t.num_rows == 0:
        raise ValueError("the warehouse holds no requests — ingest the request log first")
    sizes = set(t["block_size"].to_pylist())
    if len(sizes) != 1:
        raise ValueError(
            f"the requests have several block sizes ({sorted(sizes)}) — ingest one engine's log"
        )
    lists = t["block_hashes"].combine_chunks()
    offsets = np.asarray(lists.offsets, np.int64)
    return PoolRequests(
        np.asarray(t["arrival_s"], np.float64),
        np.asarray(t["input_tokens"], np.int64),
        np.asarray(t["output_tokens"], np.int64),
        offsets - offsets[0],
        np.asarray(lists.flatten(), np.uint64),
        int(sizes.pop()),
    )


def load_streams(con: duckdb.DuckDBPyConnection, block_size: int) -> dict[int, EngineStream]:
    t = con.sql(sql.load("validate/engine_events")).to_arrow_table()
    if t.num_rows == 0:
        raise ValueError(
            "the warehouse holds no KV events — capture them (capture-events) and ingest them "
            "with --format vllm-events first"
        )
    sizes = {s for s in t["block_size"].to_pylist() if s is not None}
    if sizes - {block_size}:
        raise ValueError(
            f"the KV events are of {sorted(sizes)}-token blocks, the requests of {block_size} "
            "— re-ingest the events after the requests (they are checked against them)"
        )
    ranks = np.asarray(t["rank"], np.int32)
    kinds = np.array([KINDS[k] for k in t["kind"].to_pylist()], np.int8)
    ids = t["block_id"]
    linked = np.asarray(ids.is_valid())
    block_id = np.asarray(ids.fill_null(0), np.uint64)
    keys: dict[bytes | None, int] = {}
    key = np.array([keys.setdefault(k, len(keys)) for k in t["key"].to_pylist()], np.int64)
    times = np.asarray(t["t"], np.float64)
    streams = {}
    for r in np.unique(ranks).tolist():
        m = ranks == r
        streams[r] = EngineStream(times[m], kinds[m], block_id[m], linked[m], key[m])
    return streams


def validate_events(
    requests: PoolRequests, streams: dict[int, EngineStream], settings: EventValidateSettings
) -> list[RankResult]:
    """Each rank's capacity scan over the requests attributed to it."""
    model = POOL_MODELS[settings.model]
    service = ServiceModel(settings.tpot_ms / 1e3, settings.prefill_tokens_per_s)
    stored_t, stored_rank, stored_id = [], [], []
    for r, s in streams.items():
        m = (s.kind == STORED_KIND) & s.linked
        stored_t.append(s.t[m])
        stored_id.append(s.block_id[m])
        stored_rank.append(np.full(int(m.sum()), r, np.int32))
    served = attribute_ranks(
        requests, np.concatenate(stored_t), np.concatenate(stored_rank), np.concatenate(stored_id)
    )
    results = []
    for r, stream in sorted(streams.items()):
        mine = requests.subset(served == r)
        ends = window_ends(stream, settings.windows)
        scanned, best = scan(stream, mine, model, service, ends, list(settings.capacities) or None)
        unlinked = int(np.count_nonzero(~stream.linked & (stream.kind != CLEARED_KIND)))
        results.append(RankResult(r, mine.n, stream.peak_held(), unlinked, best, scanned))
    return results


def tables(results: list[RankResult], settings: EventValidateSettings) -> tuple[pa.Table, pa.Table]:
    rows, windows = [], []
    for res in results:
        for a in res.scanned:
            rows.append(
                {
                    "rank": res.rank,
                    "model": settings.model,
                    "capacity_blocks": a.capacity,
                    "best": a.capacity == res.best.capacity,
                    "requests": res.requests,
                    "windows": a.windows,
                    "engine_blocks": a.engine_blocks,
                    "sim_blocks": a.sim_blocks,
                    "both_blocks": a.both_blocks,
                    "engine_held_share": a.engine_held_share,
                    "sim_held_share": a.sim_held_share,
                    "jaccard": a.jaccard,
                    "engine_removals": a.engine_removals,
                    "sim_evictions": a.sim_evictions,
                    "removals_matched": a.removals_matched,
                    "removal_match_share": a.removal_match_share,
                    "kendall_tau": a.kendall_tau,
                    "requests_waited": a.waited,
                    "engine_peak_blocks": res.peak,
                    "unlinked_events": res.unlinked,
                    "tpot_ms": settings.tpot_ms,
                    "prefill_tokens_per_s": settings.prefill_tokens_per_s,
                }
            )
        for end, e, s, both in res.best.per_window:
            windows.append(
                {
                    "rank": res.rank,
                    "model": settings.model,
                    "capacity_blocks": res.best.capacity,
                    "window_end": int(round(end * 1e6)),
                    "engine_blocks": e,
                    "sim_blocks": s,
                    "both_blocks": both,
                }
            )
    window_table = pa.Table.from_pylist(windows)
    if window_table.num_rows:
        ts = window_table["window_end"].cast(pa.timestamp("us", tz="UTC"))
        window_table = window_table.set_column(
            window_table.schema.get_field_index("window_end"), "window_end", ts
        )
    return pa.Table.from_pylist(rows), window_table


def validate_against_events(wh: str | Path, settings: EventValidateSettings) -> list[RankResult]:
    settings.check()
    with warehouse.StageRun(wh, "validate", settings) as stage_run:
        with stage_run.reading() as con:
            requests = load_requests(con)
            streams = load_streams(con, requests.block_size)
        results = validate_events(requests, streams, settings)
        agreement, windows = tables(results, settings)
        with stage_run.publishing() as con:
            warehouse.append(con, "validation_events", agreement, stage_run.run_id)
            warehouse.append(con, "validation_event_windows", windows, stage_run.run_id)
    return results
