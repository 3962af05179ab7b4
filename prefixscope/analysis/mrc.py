"""Hit-rate curves: the token hit rate at every cache capacity, for the fleet and each tenant.

- ``lru``: one pass (``_stack.py``). LRU here is a stack algorithm, so the hit tokens at every
  capacity from 1 block to the working set come from one replay, and equal what ``simulate``
  gives at each capacity, to the token. Rows are written at ``points`` log-spaced capacities
  plus the ones asked for.
- every other bounded policy: the simulator itself at a grid of capacities, one process per
  core (``ProcessPoolExecutor``), or one task per capacity on a running Dask cluster; each
  point is the simulator's own figure.
- ``sample_rate < 1``: an estimate from a spatial sample, flagged ``exact = false``, its
  capacities scaled by ``1 / rate``: of blocks (``sample_by = 'block'``, the default: LRU only,
  ``block_sampling.py`` and ``sampled_curve.py``) or of prefix families (``'family'``,
  ``sampling.py``: any policy, the sample replayed as a trace of its own).

Pure functions from a trace to an Arrow table; ``run_curve`` alone touches the warehouse.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace

import duckdb
import numpy as np
import pyarrow as pa

from prefixscope.analysis import isolation as iso
from prefixscope.analysis.block_sampling import BlockSample, load_block_sample
from prefixscope.analysis.models import GIB, resolve_model
from prefixscope.analysis.policies import POLICIES, PolicyOptions
from prefixscope.analysis.sampling import load_sampled_trace
from prefixscope.analysis.simulate import Capacities
from prefixscope.analysis.steady import INTERVALS, mser5_truncation, warm_up
from prefixscope.analysis.trace import Trace, load_trace
from prefixscope.analysis.windows import WINDOWS
from prefixscope.warehouse import FLEET, recorded_run

STEADY = "steady"
#: What a sample keeps: blocks by hash; blocks by hash with the first block of every request
#: kept whole (``block_sampling.py``, "Heads"); whole prefix families.
SAMPLE_BY = ("block", "block-head", "family")
#: Per block-sampling mode, the leading positions of each request whose blocks are kept whole.
HEAD_BLOCKS = {"block": 0, "block-head": 1}
#: Log-spaced points of a one-pass curve (it costs nothing to add more), and of a grid curve
#: (each point is a full replay).
STACK_POINTS = 256
GRID_POINTS = 24

MRC_SCHEMA = pa.schema(
    [
        ("tenant", pa.string()),
        ("policy", pa.string()),
        ("isolation", pa.string()),
        ("measure_window", pa.string()),
        ("method", pa.string()),
        ("capacity_blocks", pa.int64()),
        ("capacity_tokens", pa.int64()),
        ("capacity_gib", pa.float64()),
        ("model", pa.string()),
        ("kv_dtype", pa.string()),
        ("block_size", pa.int32()),
        ("requests", pa.int64()),
        ("input_tokens", pa.int64()),
        ("hit_tokens", pa.int64()),
        ("token_hit_rate", pa.float64()),
        ("exact", pa.bool_()),
        ("sample_rate", pa.float64()),
        ("sample_by", pa.string()),
    ]
)


@dataclass(frozen=True)
class CurveSettings:
    """What one curve computation needs besides the trace."""

    policy: str = "lru"
    windows: tuple[str, ...] = ("all",)
    isolation: str = "shared"
    points: int | None = None  # log-spaced points (default: STACK_POINTS or GRID_POINTS)
    capacities: tuple[int, ...] = ()  # capacities asked for, in blocks of the full trace
    sample_rate: float = 1.0
    sample_by: str = "block"  # what a sample keeps: blocks or whole prefix families
    model: str | None = None
    model_config: str | None = None
    kv_dtype: str = "bf16"
    quota_file: str | None = None
    ttl_s: float | None = None
    workers: int | None = None  # grid curves: processes (default: one per core)
    dask_address: str | None = None  # grid curves: a running Dask cluster's scheduler instead

    def check(self) -> None:
        if self.policy not in POLICIES or not POLICIES[self.policy].bounded:
            bounded = ", ".join(n for n, p in POLICIES.items() if p.bounded and n != "pinned")
            raise ValueError(f"a curve needs a bounded policy ({bounded}), got {self.policy!r}")
        if self.policy == "pinned":
            raise ValueError("pinned has no curve: its pins must fit every capacity")
        if self.isolation not in iso.ISOLATIONS:
            raise ValueError(f"unknown isolation {self.isolation!r}")
        for w in self.windows:
            if w not in WINDOWS and w != STEADY:
                raise ValueError(f"unknown window {w!r}; known: {', '.join([*WINDOWS, STEADY])}")
        if STEADY in self.windows and self.isolation == "partitioned":
            raise ValueError("a steady window per capacity is not defined for partitioned curves")
        if not 0 < self.sample_rate <= 1:
            raise ValueError(f"a sample rate is in (0, 1], got {self.sample_rate}")
        if self.sample_by not in SAMPLE_BY:
            raise ValueError(f"sample_by is one of {SAMPLE_BY}, got {self.sample_by!r}")
        if self.by_block:
            # Block sampling estimates stack depths, so it answers the stack algorithm only; a
            # per-capacity warm-up and per-tenant caches would need their own estimators.
            if not self.stack:
                raise ValueError("block sampling estimates the lru curve; use --sample-by family")
            if STEADY in self.windows or self.isolation == "partitioned":
                raise ValueError(
                    "a block-sampled curve has windows all and last-half, shared or salted; "
                    "use --sample-by family or the exact curve"
                )

    @property
    def stack(self) -> bool:
        return self.policy == "lru"

    @property
    def by_block(self) -> bool:
        return self.sample_rate < 1 and self.sample_by in HEAD_BLOCKS

    @property
    def head(self) -> int:
        """Leading blocks of each request a block sample keeps whole."""
        return HEAD_BLOCKS.get(self.sample_by, 0)

    @property
    def n_points(self) -> int:
        return self.points or (STACK_POINTS if self.stack else GRID_POINTS)


@dataclass(frozen=True)
class Measured:
    """Sums over one group's measured requests at each listed capacity (arrays by point)."""

    tenant: str
    window: str
    requests: np.ndarray
    input_tokens: np.ndarray
    hit_tokens: np.ndarray


@dataclass(frozen=True)
class Curve:
    """One cache's curve: at each capacity (``capacity_blocks``, on the cache's own scale),
    the sums of every (window, tenant) group."""

    capacity_blocks: np.ndarray
    groups: list[Measured] = field(default_factory=list)


def capacity_points(working_set: int, n: int, asked: Sequence[int] = ()) -> np.ndarray:
    """At least ``min(n, working_set)`` distinct capacities, log-spaced from 1 block to the
    working set (where LRU holds every block and meets the ceiling), plus those ``asked``."""
    top = max(1, int(working_set))
    want = min(n, top)
    k = want
    while True:
        grid = np.unique(np.round(np.geomspace(1, top, k)).astype(np.int64))
        if len(grid) >= want:
            break
        k += max(1, want - len(grid))
    return np.unique(np.concatenate([grid, np.asarray(asked, dtype=np.int64)]))


# --- the one-pass LRU curve ----------------------------------------------------------------


def lru_curve(
    trace: Trace,
    points: np.ndarray,
    windows: Sequence[str],
    masks: dict[str, np.ndarray] | None = None,
) -> Curve:
    """Exact LRU hit tokens at every capacity in ``points`` (sorted), for the fleet and each
    tenant over each window, from one pass over ``trace``. ``masks``: the measured requests of
    each window when ``trace`` is part of a larger one (its windows are the whole trace's)."""
    from prefixscope.analysis import _stack

    points = np.asarray(points, dtype=np.int64)
    plain, groups = window_groups(trace, windows, masks)
    hist, buckets = _stack.trace_stack_curve(trace, points, groups, STEADY in windows)
    # Hits at points[j]: the lookups whose bucket is at most j.
    hits = np.cumsum(hist, axis=2)[:, :, : len(points)]
    out = Curve(points)
    for row, w in enumerate(plain):
        mask = groups[row] >= 0
        for name, code in members(trace, mask):
            sel = mask if code < 0 else mask & (trace.tenant_codes == code)
            h = hits[row].sum(axis=0) if code < 0 else hits[row, code]
            out.groups.append(_constant(name, w, sel, trace, h))
    if STEADY in windows:
        out.groups.extend(_steady(trace, points, buckets))
    return out


def window_groups(
    trace: Trace, windows: Sequence[str], masks: dict[str, np.ndarray] | None = None
) -> tuple[list[str], np.ndarray]:
    """The windows measured by request (all but ``steady``), and per such window (a row) each
    request's tenant code where the window measures it, -1 where it does not."""
    plain = [w for w in windows if w != STEADY]
    masks = masks or {w: WINDOWS[w](trace) for w in plain}
    groups = np.full((len(plain), trace.n_requests), -1, np.int32)
    for row, w in enumerate(plain):
        mask = masks[w]
        groups[row, mask] = trace.tenant_codes[mask]
    return plain, groups


def members(trace: Trace, measured: np.ndarray) -> list[tuple[str, int]]:
    """The fleet (code -1), then each tenant with measured requests."""
    present = np.unique(trace.tenant_codes[measured])
    return [(FLEET, -1)] + [(trace.tenants[c], int(c)) for c in present]


def _constant(name: str, window: str, sel: np.ndarray, trace: Trace, hits: np.ndarray) -> Measured:
    """A group whose measured requests are the same at every capacity."""
    k = len(hits)
    return Measured(
        name,
        window,
        np.full(k, int(sel.sum()), np.int64),
        np.full(k, int(trace.input_tokens[sel].sum()), np.int64),
        np.asarray(hits, dtype=np.int64),
    )


def filled_at(trace: Trace, points: np.ndarray) -> np.ndarray:
    """Per capacity, the first request after which an LRU cache of it is full (-1: never).
    LRU evicts only above capacity, so it holds ``min(C, distinct blocks seen)`` blocks."""
    _, first = np.unique(trace.blocks, return_index=True)
    new_blocks = np.bincount(trace.request_of_lookup[first], minlength=trace.n_requests)
    seen = np.cumsum(new_blocks)
    at = np.searchsorted(seen, points, side="left")
    return np.where(at < trace.n_requests, at, -1)


def _steady(trace: Trace, points: np.ndarray, buckets: np.ndarray) -> list[Measured]:
    """The ``steady`` window per capacity, exactly as ``simulate`` defines it: from the later of
    the fill point and the MSER-5 truncation of the fleet's token hit rate at that capacity."""
    from prefixscope.analysis import _stack

    n, k = trace.n_requests, len(points)
    bounds = np.linspace(0, n, INTERVALS + 1).astype(np.int64)
    interval = np.searchsorted(bounds, np.arange(n), side="right") - 1
    per = _stack.tally(
        buckets,
        trace.offsets,
        trace.input_tokens,
        trace.block_size,
        interval.astype(np.int32)[None, :],
        INTERVALS,
        k + 1,
    )[0]
    interval_hits = np.cumsum(per, axis=1)[:, :k].astype(float)  # (interval, point)
    interval_inp = np.bincount(interval, weights=trace.input_tokens, minlength=INTERVALS)
    fill = filled_at(trace, points)
    starts = np.empty(k, np.int64)
    for j in range(k):
        mser = 0
        if n >= INTERVALS:
            with np.errstate(invalid="ignore", divide="ignore"):
                rates = np.where(
                    interval_inp > 0, interval_hits[:, j] / np.maximum(interval_inp, 1), np.nan
                )
            mser = mser5_truncation(rates, bounds)
        starts[j] = max(fill[j] + 1, mser) if fill[j] >= 0 else n
    hits = _stack.suffix_tally(
        buckets,
        trace.offsets,
        trace.input_tokens,
        trace.block_size,
        trace.tenant_codes,
        len(trace.tenants),
        starts,
    )
    after = np.arange(n)[None, :] >= starts[:, None]  # (point, request)
    out = []
    for name, code in members(trace, np.ones(n, bool)):
        sel = after if code < 0 else after & (trace.tenant_codes == code)[None, :]
        out.append(
            Measured(
                name,
                STEADY,
                sel.sum(axis=1).astype(np.int64),
                (sel * trace.input_tokens[None, :]).sum(axis=1).astype(np.int64),
                hits.sum(axis=0) if code < 0 else hits[code],
            )
        )
    return out


def partitioned_lru_curve(
    trace: Trace, points: np.ndarray, windows: Sequence[str], n_points: int, quota_file: str | None
) -> tuple[Curve, list[Curve]]:
    """Each tenant its own LRU cache: one pass per tenant's requests. Returns the fleet's curve
    over the fleet's capacity ``C`` (each tenant holding ``max(1, floor(share · C))`` blocks, as
    ``simulate --isolation partitioned``) and each tenant's curve over its own cache's size."""
    shares = iso.quotas(trace, quota_file)
    fleet_hits: dict[str, np.ndarray] = {}
    tenant_curves = []
    for code, share in enumerate(shares):
        rows = np.flatnonzero(trace.tenant_codes == code)
        if len(rows) == 0:
            continue
        part = iso.subset(trace, rows)
        quota = np.maximum(1, (share * points).astype(np.int64))
        own = capacity_points(part.n_unique, n_points)
        axis = np.unique(np.concatenate([own, quota]))
        curve = lru_curve(part, axis, windows, {w: WINDOWS[w](trace)[rows] for w in windows})
        at_quota = np.searchsorted(axis, quota)
        for g in curve.groups:
            if g.tenant == FLEET:
                prev = fleet_hits.get(g.window, 0)
                fleet_hits[g.window] = prev + g.hit_tokens[at_quota]
        keep = np.isin(axis, own)
        tenant_curves.append(
            Curve(
                axis[keep],
                [
                    Measured(
                        g.tenant,
                        g.window,
                        g.requests[keep],
                        g.input_tokens[keep],
                        g.hit_tokens[keep],
                    )
                    for g in curve.groups
                    if g.tenant != FLEET
                ],
            )
        )
    fleet = Curve(points)
    for w in windows:
        sel = WINDOWS[w](trace)
        fleet.groups.append(
            _constant(FLEET, w, sel, trace, fleet_hits.get(w, np.zeros(len(points))))
        )
    return fleet, tenant_curves


# --- grid curves: the simulator at each capacity ---------------------------------------------

_WORKER_TRACE: Trace | None = None


def _init_worker(trace: Trace) -> None:
    global _WORKER_TRACE
    _WORKER_TRACE = trace


def _grid_point(job: tuple[str, int, str, tuple[str, ...], str | None, float | None]) -> list:
    policy, capacity, isolation, windows, quota_file, ttl_s = job
    trace = _WORKER_TRACE
    assert trace is not None
    return _measure_point(trace, policy, capacity, isolation, windows, quota_file, ttl_s)


def _measure_point(trace, policy, capacity, isolation, windows, quota_file, ttl_s) -> list:  # type: ignore[no-untyped-def]
    """(window, tenant, requests, input tokens, hit tokens) at one capacity, by ``simulate``'s
    own rules (its hit tokens, windows and warm-up)."""
    from prefixscope.analysis.simulate import hit_tokens

    options = PolicyOptions(ttl_s=ttl_s)
    outcome = iso.replay(trace, policy, capacity, options, isolation, quota_file)
    tokens = hit_tokens(trace, outcome.hit_blocks)
    rows = []
    for w in windows:
        if w == STEADY:
            wu = warm_up(tokens, trace.input_tokens, outcome.filled_at, True)
            measured = np.arange(trace.n_requests) >= wu.end
        else:
            measured = WINDOWS[w](trace)
        for name, code in members(trace, measured) if measured.any() else [(FLEET, -1)]:
            sel = measured if code < 0 else measured & (trace.tenant_codes == code)
            rows.append(
                (
                    w,
                    name,
                    int(sel.sum()),
                    int(trace.input_tokens[sel].sum()),
                    int(tokens[sel].sum()),
                )
            )
    return rows


def grid_curve(trace: Trace, points: np.ndarray, settings: CurveSettings) -> Curve:
    """The simulator at each capacity of ``points``, in parallel: one process per core (or
    ``settings.workers``), or the workers of a running Dask cluster (``settings.dask_address``);
    results come back in capacity order, so the curve is the same wherever the points ran."""
    jobs = [
        (
            settings.policy,
            int(c),
            settings.isolation,
            settings.windows,
            settings.quota_file,
            settings.ttl_s,
        )
        for c in points
    ]
    if settings.dask_address:
        return collect_grid(points, _on_dask(settings.dask_address, trace, jobs))
    workers = settings.workers or os.cpu_count() or 1
    if workers == 1 or len(jobs) == 1:
        _init_worker(trace)
        try:
            results = [_grid_point(j) for j in jobs]
        finally:
            _init_worker(None)  # type: ignore[arg-type]
    else:
        with ProcessPoolExecutor(
            max_workers=min(workers, len(jobs)), initializer=_init_worker, initargs=(trace,)
        ) as pool:
            results = list(pool.map(_grid_point, jobs))
    return collect_grid(points, results)


def _on_dask(address: str, trace: Trace, jobs: list) -> list[list]:
    """The grid points as tasks on the Dask cluster at ``address``: the trace goes to every
    worker once (scattered), then one task per capacity; results in capacity order."""
    from distributed import Client

    with Client(address) as client:
        [shared] = client.scatter([trace], broadcast=True)
        return client.gather(client.map(_point_of, [shared] * len(jobs), jobs, pure=False))


def _point_of(trace: Trace, job: tuple) -> list:
    return _measure_point(trace, *job)


def collect_grid(points: np.ndarray, results: Sequence[list]) -> Curve:
    """Per-capacity results (as from :func:`_measure_point`) as one curve; a group absent at a
    capacity (no measured request there) counts zero."""
    keys: dict[tuple[str, str], int] = {}
    for rows in results:
        for w, name, *_ in rows:
            keys.setdefault((w, name), len(keys))
    sums = np.zeros((len(keys), 3, len(points)), np.int64)
    for j, rows in enumerate(results):
        for w, name, req, inp, hit in rows:
            sums[keys[(w, name)], :, j] = (req, inp, hit)
    curve = Curve(np.asarray(points, dtype=np.int64))
    for (w, name), i in keys.items():
        curve.groups.append(Measured(name, w, sums[i, 0], sums[i, 1], sums[i, 2]))
    return curve


# --- the table -------------------------------------------------------------------------------


def compute_curves(trace: Trace, settings: CurveSettings) -> pa.Table:
    """Every row of the ``mrc`` table for ``trace`` (a family sample when
    ``settings.sample_rate < 1``: its capacities are then scaled by ``1 / rate``; a block
    sample goes to ``sampled_curve.compute_sampled_curves``)."""
    settings.check()
    if settings.by_block:
        raise ValueError("a block-sampled curve is computed from a BlockSample")
    keyed = iso.salted(trace) if settings.isolation == "salted" else trace
    asked = sampled_capacities(settings)
    points = capacity_points(keyed.n_unique, settings.n_points, asked)
    curves: list[Curve] = []
    if settings.stack and settings.isolation == "partitioned":
        fleet, tenants = partitioned_lru_curve(
            trace, points, settings.windows, settings.n_points, settings.quota_file
        )
        curves = [fleet, *tenants]
    elif settings.stack:
        curves = [lru_curve(keyed, points, settings.windows)]
    else:
        curves = [grid_curve(trace, points, settings)]
    return curve_table(trace.block_size, curves, settings)


def sampled_capacities(settings: CurveSettings) -> list[int]:
    """The capacities asked for, on the sample's scale (a sampled block stands for 1 / rate)."""
    return [max(1, round(c * settings.sample_rate)) for c in settings.capacities]


def curve_table(block_size: int, curves: Sequence[Curve], settings: CurveSettings) -> pa.Table:
    """The ``mrc`` rows of ``curves``, their capacities on the full trace's scale."""
    shape = (
        resolve_model(settings.model, settings.model_config)
        if (settings.model or settings.model_config)
        else None
    )
    asked = dict(zip(sampled_capacities(settings), settings.capacities, strict=True))
    return _table(block_size, curves, settings, shape, asked)


def _table(block_size, curves, settings, shape, asked) -> pa.Table:  # type: ignore[no-untyped-def]
    rate = settings.sample_rate
    cols: dict[str, list] = {f.name: [] for f in MRC_SCHEMA}
    method = "stack" if settings.stack else "grid"
    for curve in curves:
        # Capacities on the full trace's scale: a sampled cache of c blocks stands for c / rate.
        scaled = [asked.get(int(c), round(int(c) / rate)) for c in curve.capacity_blocks]
        for g in curve.groups:
            k = len(scaled)
            cols["tenant"] += [g.tenant] * k
            cols["measure_window"] += [g.window] * k
            cols["capacity_blocks"] += scaled
            cols["requests"] += g.requests.tolist()
            cols["input_tokens"] += g.input_tokens.tolist()
            cols["hit_tokens"] += g.hit_tokens.tolist()
            cols["token_hit_rate"] += [
                h / i if i else None
                for h, i in zip(g.hit_tokens.tolist(), g.input_tokens.tolist(), strict=True)
            ]
    n = len(cols["tenant"])
    cols["policy"] = [settings.policy] * n
    cols["isolation"] = [settings.isolation] * n
    cols["method"] = [method] * n
    cols["capacity_tokens"] = [c * block_size for c in cols["capacity_blocks"]]
    per_block = shape.kv_bytes_per_token(settings.kv_dtype) * block_size if shape else None
    cols["capacity_gib"] = [
        c * per_block / GIB if per_block else None for c in cols["capacity_blocks"]
    ]
    cols["model"] = [shape.name if shape else None] * n
    cols["kv_dtype"] = [settings.kv_dtype if shape else None] * n
    cols["block_size"] = [block_size] * n
    cols["exact"] = [rate == 1] * n
    cols["sample_rate"] = [rate] * n
    cols["sample_by"] = [settings.sample_by if rate < 1 else None] * n
    return pa.table(cols, schema=MRC_SCHEMA)


def write_mrc(con: duckdb.DuckDBPyConnection, table: pa.Table, run_id: str) -> int:
    con.register("new_rows", table)
    try:
        con.execute("INSERT INTO mrc BY NAME SELECT ? AS run_id, * FROM new_rows", [run_id])
    finally:
        con.unregister("new_rows")
    return table.num_rows


def run_curve(
    con: duckdb.DuckDBPyConnection,
    settings: CurveSettings,
    capacities: Capacities | None = None,
    parameters: dict[str, object] | None = None,
) -> pa.Table:
    """Load (and sample) the warehouse's trace, compute the curves, store and return them.
    ``capacities`` are points to add to the curve (blocks, tokens or GiB of a model)."""
    settings.check()
    with recorded_run(con, "curve", parameters or dict(settings.__dict__)) as run_id:
        if settings.by_block:
            source: Trace | BlockSample = load_block_sample(
                con, settings.sample_rate, settings.head
            )
        elif settings.sample_rate < 1:
            source = load_sampled_trace(con, settings.sample_rate)
        else:
            source = load_trace(con)
        block_size = source.block_size if isinstance(source, Trace) else source.trace.block_size
        if capacities is not None:
            blocks, _ = capacities.resolve(block_size)
            settings = replace(
                settings,
                capacities=tuple(blocks),
                model=settings.model or capacities.model,
                model_config=settings.model_config or capacities.model_config,
            )
        if isinstance(source, Trace):
            table = compute_curves(source, settings)
        else:
            from prefixscope.analysis.sampled_curve import compute_sampled_curves

            table = compute_sampled_curves(source, settings)
        write_mrc(con, table, run_id)
    return table


__all__ = [
    "MRC_SCHEMA",
    "SAMPLE_BY",
    "Curve",
    "CurveSettings",
    "Measured",
    "capacity_points",
    "compute_curves",
    "curve_table",
    "grid_curve",
    "lru_curve",
    "members",
    "run_curve",
    "window_groups",
    "write_mrc",
]
