"""Stage ``explain``: one request, block by block — hit or miss, last use and by whom, stack
depth, and why (``prefixscope.analysis.structure.explain``; docs/validate.md).

It only reads: nothing is written and no run is recorded. What it reads besides the requests:

- **the capacity**, when ``capacity_blocks`` is not given: the middle of the capacities the
  latest simulate results hold (``latest_hit_rates``; fleet rows, shared isolation; those of
  the policy asked for when there are any), else the capacity of the latest ``structure`` run,
  else an error asking for ``--capacity-blocks``;
- **sessions**: the latest ``structure`` run's ``turns`` (the log's sessions, else inferred from
  the block chains), else the log's ``session_id``, else none (a block last used by the same
  tenant is then ``same tenant``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pyarrow.compute as pc

from prefixscope import warehouse
from prefixscope.analysis.fleet.explain import FleetExplanation, explain_in_fleet
from prefixscope.analysis.fleet.grid import engine_for
from prefixscope.analysis.fleet.replayed import Pins
from prefixscope.analysis.fleet.run import Fleet
from prefixscope.analysis.fleet.settings import FleetSettings
from prefixscope.analysis.fleet.traffic import load_traffic
from prefixscope.analysis.policies import POLICIES
from prefixscope.analysis.simulation.grid import policy_options
from prefixscope.analysis.simulation.scenarios import Settings
from prefixscope.analysis.structure.explain import Explanation, explain
from prefixscope.analysis.structure.log import load_log
from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.load import load_trace


@dataclass(frozen=True)
class ExplainSettings:
    request: str  # a request_id of the requests table, or a log request id
    policy: str = "lru"
    capacity_blocks: int | None = None  # None: what the warehouse holds (module docstring)
    ttl_s: float | None = None
    pin_file: str | None = None
    pin_top: int | None = None
    #: Explain it in a fleet (its miss budget, block by block): the router, else one cache.
    router: str | None = None
    replicas: int = 1
    engine: str = "ideal"
    load_scale: float = 1.0
    router_delay_s: float = 0.0  # kv-aware's view of the caches lags them (``_stale.py``)


@dataclass(frozen=True)
class Sessions:
    """A session code per request in replay order (-1: unknown), the code's names, and where
    they come from, in words."""

    codes: np.ndarray | None
    names: tuple[str, ...]
    source: str


@dataclass(frozen=True)
class ExplainResult:
    explanation: Explanation
    request_id: str
    tenant: str
    session: str | None
    sessions_from: str
    capacity_from: str | None  # where the capacity came from; None for an unbounded policy
    block_size: int
    last_request_ids: tuple[str | None, ...]  # per block, the request id of its last use


@dataclass(frozen=True)
class FleetExplainResult:
    explanation: FleetExplanation
    request_id: str
    tenant: str
    fleet: Fleet
    capacity_from: str
    block_size: int


def explain_in_a_fleet(wh: str | Path, settings: ExplainSettings) -> FleetExplainResult:
    """The request in the fleet ``settings`` names (``router`` set): its miss budget block by
    block, the fleet's steps priced as ``fleet`` prices them by default."""
    assert settings.router is not None
    fleet_settings = FleetSettings(
        routers=(settings.router,), replicas=(settings.replicas,), engines=(settings.engine,),
        load_scales=(settings.load_scale,), router_delays=(settings.router_delay_s,),
        policy=settings.policy, ttl_s=settings.ttl_s,
        pins=Pins(top=settings.pin_top, file=settings.pin_file),
    )  # fmt: skip
    fleet_settings.check()
    with warehouse.reading(wh) as con:
        trace = load_trace(con)
        traffic = load_traffic(con)
        r = find_request(con, trace, settings.request)
        capacity, capacity_from = settings.capacity_blocks, "--capacity-blocks"
        if capacity is None:
            capacity, capacity_from = stored_fleet_capacity(con, settings)
    (fleet,) = fleet_settings.grid([capacity])
    fleet.check()
    engine, _ = engine_for(fleet_settings, None)
    why = explain_in_fleet(trace, traffic, fleet, engine, r)
    ids = trace.request_ids
    assert ids is not None
    return FleetExplainResult(
        why, ids[r].as_py(), trace.tenants[trace.tenant_codes[r]], fleet, capacity_from,
        trace.block_size,
    )  # fmt: skip


def stored_fleet_capacity(
    con: duckdb.DuckDBPyConnection, settings: ExplainSettings
) -> tuple[int, str]:
    """The middle capacity the latest fleet runs simulated for this router, replica count and
    engine, else an error asking for ``--capacity-blocks``."""
    caps = [
        c
        for (c,) in con.execute(
            "SELECT DISTINCT capacity_blocks FROM latest_fleet_hit_rates WHERE router = ? "
            "AND replicas = ? AND coalesce(engine, 'ideal') = ? ORDER BY 1",
            [settings.router, settings.replicas, settings.engine],
        ).fetchall()
    ]
    if not caps:
        raise ValueError(
            "no fleet of that router, replica count and engine is stored in the warehouse — "
            "give --capacity-blocks N"
        )
    middle = caps[(len(caps) - 1) // 2]
    return int(middle), f"the middle of the {len(caps)} capacities the latest fleet runs simulated"


def explain_requests(wh: str | Path, settings: ExplainSettings) -> ExplainResult:
    if settings.policy not in POLICIES:
        raise ValueError(
            f"unknown policy {settings.policy!r} — choose one of {', '.join(POLICIES)}"
        )
    with warehouse.reading(wh) as con:
        trace = load_trace(con)
        r = find_request(con, trace, settings.request)
        sessions = load_sessions(con, trace)
        capacity, capacity_from = settings.capacity_blocks, "--capacity-blocks"
        if not POLICIES[settings.policy].bounded:
            capacity, capacity_from = None, None
        elif capacity is None:
            capacity, capacity_from = stored_capacity(con, settings.policy)
    options = policy_options(
        trace, Settings(ttl_s=settings.ttl_s, pin_file=settings.pin_file, pin_top=settings.pin_top)
    )
    why = explain(trace, r, settings.policy, capacity, sessions.codes, options)
    ids = trace.request_ids
    assert ids is not None  # load_trace keeps them
    code = -1 if sessions.codes is None else int(sessions.codes[r])
    return ExplainResult(
        explanation=why,
        request_id=ids[r].as_py(),
        tenant=trace.tenants[trace.tenant_codes[r]],
        session=sessions.names[code] if code >= 0 else None,
        sessions_from=sessions.source,
        capacity_from=capacity_from,
        block_size=trace.block_size,
        last_request_ids=tuple(
            None if b.last_request is None else ids[b.last_request].as_py() for b in why.blocks
        ),
    )


def find_request(con: duckdb.DuckDBPyConnection, trace: Trace, request: str) -> int:
    """The replay index of ``request``: a warehouse request_id, else a unique log request id."""
    ids = trace.request_ids
    assert ids is not None
    index = pc.index(ids, request).as_py()
    if index >= 0:
        return int(index)
    found = con.execute(
        "SELECT request_id FROM requests WHERE log_request_id = ? ORDER BY request_id LIMIT 3",
        [request],
    ).fetchall()
    shown = request if len(request) <= 80 else request[:77] + "..."
    if len(found) > 1:
        examples = ", ".join(f for (f,) in found[:2])
        raise ValueError(
            f"the log request id {shown!r} names several requests — give a request_id "
            f"(e.g. {examples})"
        )
    if not found:
        example = ids[0].as_py() if len(ids) else "?"
        raise ValueError(
            f"no request {shown!r} in the warehouse — give a request_id of the requests table "
            f"(e.g. {example}) or a log request id"
        )
    return int(pc.index(ids, found[0][0]).as_py())


def load_sessions(con: duckdb.DuckDBPyConnection, trace: Trace) -> Sessions:
    """Sessions per request: the latest structure run's turns, else the log's session_id."""
    rows = con.execute(
        "SELECT request_id, session, session_inferred FROM turns "
        "WHERE run_id = (SELECT run_id FROM latest_structure_run)"
    ).fetchall()
    if rows:
        by_id = {rid: s for rid, s, _ in rows}
        inferred = sum(1 for *_, i in rows if i)
        labels = np.array([by_id.get(rid, "") for rid in trace.request_ids.to_pylist()], object)  # type: ignore[union-attr]
        names, codes = np.unique(labels.astype(str), return_inverse=True)
        codes = np.where(labels == "", -1, codes.ravel())
        how = (
            "inferred from the block chains"
            if inferred == len(rows)
            else "from the log"
            if inferred == 0
            else "from the log, else inferred from the block chains"
        )
        return Sessions(codes, tuple(map(str, names)), f"the latest structure run's turns ({how})")
    log = load_log(con, trace)
    if (log.ids.session >= 0).any():
        return Sessions(
            log.ids.session,
            log.session_names,
            "the log's session_id (run `prefixscope structure` to infer the missing ones)",
        )
    return Sessions(None, (), "none: the log has no session_id and no structure run infers them")


def stored_capacity(con: duckdb.DuckDBPyConnection, policy: str) -> tuple[int, str]:
    """The capacity to explain at when none is given, and where it came from."""
    simulated = con.execute(
        "SELECT DISTINCT policy, capacity_blocks FROM latest_hit_rates "
        "WHERE capacity_blocks IS NOT NULL AND tenant = '*' AND isolation = 'shared'"
    ).fetchall()
    mine = sorted(c for p, c in simulated if p == policy)
    caps = mine or sorted({c for _, c in simulated})
    if caps:
        which = f"for {policy}" if mine else "for other policies"
        middle = caps[(len(caps) - 1) // 2]
        return int(middle), f"the middle of the {len(caps)} capacities simulated {which}"
    structure = con.execute(
        "SELECT parameters->>'capacity_blocks' FROM runs "
        "WHERE run_id = (SELECT run_id FROM latest_structure_run)"
    ).fetchone()
    if structure and structure[0] is not None:
        return int(structure[0]), "the capacity of the latest structure run"
    raise ValueError(
        "no capacity is stored in the warehouse (no simulate or structure results) — give "
        "--capacity-blocks N"
    )
