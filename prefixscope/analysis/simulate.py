"""Replay a trace through policies × capacities × isolation modes and summarize the hit rates.

``simulate_grid`` is pure (trace in, tables out) so it can run anywhere a trace can be shipped;
``write_tables`` is the only step that touches the warehouse.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

import duckdb
import numpy as np
import pyarrow as pa

from prefixscope.analysis import isolation as iso
from prefixscope.analysis import pins
from prefixscope.analysis.models import resolve_model
from prefixscope.analysis.policies import POLICIES, Outcome, PolicyOptions
from prefixscope.analysis.steady import batch_means_ci, warm_up
from prefixscope.analysis.trace import Trace, load_trace
from prefixscope.analysis.windows import WINDOWS
from prefixscope.warehouse import FLEET, recorded_run

STEADY = "steady"

HIT_RATES_SCHEMA = pa.schema(
    [
        ("tenant", pa.string()),
        ("policy", pa.string()),
        ("policy_options", pa.string()),
        ("isolation", pa.string()),
        ("capacity_blocks", pa.int64()),
        ("capacity_tokens", pa.int64()),
        ("capacity_gib", pa.float64()),
        ("model", pa.string()),
        ("kv_dtype", pa.string()),
        ("block_size", pa.int32()),
        ("measure_window", pa.string()),
        ("requests", pa.int64()),
        ("input_tokens", pa.int64()),
        ("hit_tokens", pa.int64()),
        ("cross_tenant_hit_tokens", pa.int64()),
        ("hit_requests", pa.int64()),
        ("token_hit_rate", pa.float64()),
        ("request_hit_rate", pa.float64()),
        ("warmup_requests", pa.int64()),
        ("steady", pa.bool_()),
        ("ci_low", pa.float64()),
        ("ci_high", pa.float64()),
    ]
)

TIMESERIES_SCHEMA = pa.schema(
    [
        ("tenant", pa.string()),
        ("policy", pa.string()),
        ("isolation", pa.string()),
        ("capacity_blocks", pa.int64()),
        ("bucket_start", pa.timestamp("us", tz="UTC")),
        ("bucket_seconds", pa.float64()),
        ("requests", pa.int64()),
        ("input_tokens", pa.int64()),
        ("hit_tokens", pa.int64()),
        ("token_hit_rate", pa.float64()),
    ]
)

OUTCOMES_SCHEMA = pa.schema(
    [
        ("request_id", pa.string()),
        ("tenant", pa.string()),
        ("policy", pa.string()),
        ("isolation", pa.string()),
        ("capacity_blocks", pa.int64()),
        ("input_tokens", pa.int64()),
        ("hit_blocks", pa.int32()),
        ("hit_tokens", pa.int64()),
        ("first_miss_block", pa.int32()),
        ("cross_tenant_hit_tokens", pa.int64()),
    ]
)


@dataclass(frozen=True)
class Scenario:
    """One cache configuration: a policy, a capacity in blocks (None for unbounded policies,
    with the GiB it came from, if any) and how tenants share it."""

    policy: str
    capacity_blocks: int | None
    capacity_gib: float | None = None
    isolation: str = "shared"


@dataclass(frozen=True)
class Settings:
    """What every scenario of one simulation shares."""

    windows: tuple[str, ...] = ("all",)
    ttl_s: float | None = None
    pin_file: str | None = None
    pin_top: int | None = None
    quota_file: str | None = None
    model: str | None = None
    kv_dtype: str | None = None
    bucket_s: float = 300.0
    outcomes: bool = False


@dataclass
class Tables:
    hit_rates: list[dict[str, object]] = field(default_factory=list)
    timeseries: list[dict[str, object]] = field(default_factory=list)
    outcomes: list[pa.Table] = field(default_factory=list)

    def extend(self, other: Tables) -> None:
        """Add another simulation's rows (a fan-out's parts come back one scenario each)."""
        self.hit_rates += other.hit_rates
        self.timeseries += other.timeseries
        self.outcomes += other.outcomes

    def arrow(self) -> tuple[pa.Table, pa.Table, pa.Table]:
        outcomes = (
            pa.concat_tables(self.outcomes) if self.outcomes else OUTCOMES_SCHEMA.empty_table()
        )
        return (
            pa.Table.from_pylist(self.hit_rates, schema=HIT_RATES_SCHEMA),
            pa.Table.from_pylist(self.timeseries, schema=TIMESERIES_SCHEMA),
            outcomes,
        )


def check_windows(windows: Sequence[str]) -> None:
    unknown = [w for w in windows if w not in WINDOWS and w != STEADY]
    if unknown:
        known = ", ".join([*WINDOWS, STEADY])
        raise ValueError(f"unknown window {unknown[0]!r}; known: {known}")


def scenarios(
    policies: Iterable[str],
    capacities_blocks: Sequence[int],
    isolations: Sequence[str] = ("shared",),
    capacities_gib: Sequence[float | None] | None = None,
) -> list[Scenario]:
    """Every policy × capacity × isolation; an unbounded policy once per isolation."""
    gibs = list(capacities_gib) if capacities_gib else [None] * len(capacities_blocks)
    out: list[Scenario] = []
    for mode in isolations:
        if mode not in iso.ISOLATIONS:
            raise ValueError(f"unknown isolation {mode!r}; known: {', '.join(iso.ISOLATIONS)}")
    for name in policies:
        if name not in POLICIES:
            raise ValueError(f"unknown policy {name!r}; known: {', '.join(sorted(POLICIES))}")
        for mode in isolations:
            if POLICIES[name].bounded:
                if not capacities_blocks:
                    raise ValueError(f"policy {name!r} needs at least one capacity")
                out += [
                    Scenario(name, int(c), g, mode)
                    for c, g in zip(capacities_blocks, gibs, strict=True)
                ]
            elif mode != "partitioned":  # an infinite cache cut in parts is the same cache
                out.append(Scenario(name, None, None, mode))
    for s in out:
        if s.capacity_blocks is not None and s.capacity_blocks < 1:
            raise ValueError(f"capacity must be at least one block, got {s.capacity_blocks}")
    return out


def hit_tokens(trace: Trace, hit_blocks: np.ndarray) -> np.ndarray:
    """Tokens served from cache per request: ``block_size`` per hit block, capped at
    ``input_tokens``. When a hash-id trace's partial last block hits, it so counts its own
    tokens; token sources never hash a partial tail, so it is never served from cache."""
    return np.minimum(hit_blocks.astype(np.int64) * trace.block_size, trace.input_tokens)


def cross_tokens(trace: Trace, outcome: Outcome) -> np.ndarray:
    """Hit tokens per request served from blocks another tenant inserted."""
    if len(outcome.cross) == 0:  # one tenant: nobody else to hit
        return np.zeros(trace.n_requests, dtype=np.int64)
    weights = np.where(outcome.cross, trace.token_sizes, 0)
    return np.bincount(trace.request_of_lookup, weights=weights, minlength=trace.n_requests).astype(
        np.int64
    )


def policy_options(trace: Trace, settings: Settings) -> PolicyOptions:
    """The options the policies read, resolved against this trace."""
    if settings.pin_file and settings.pin_top:
        raise ValueError("give --pin FILE or --pin-top K, not both")
    pinned = None
    if settings.pin_file:
        pinned = pins.from_file(trace, settings.pin_file)
    elif settings.pin_top:
        pinned = pins.top_shared(trace, settings.pin_top)
    return PolicyOptions(ttl_s=settings.ttl_s, pinned=pinned)


def _option_text(policy: str, settings: Settings, options: PolicyOptions) -> str | None:
    if policy == "ttl":
        return f"ttl={settings.ttl_s:g}s"
    if policy == "pinned" and options.pinned is not None:
        source = f"pin-top={settings.pin_top}" if settings.pin_top else f"pin={settings.pin_file}"
        return f"{source} ({int(options.pinned.sum())} blocks)"
    return None


def simulate_grid(trace: Trace, scenarios_: Sequence[Scenario], settings: Settings) -> Tables:
    """Replay ``trace`` once per scenario and measure it over every window."""
    check_windows(settings.windows)
    options = policy_options(trace, settings)
    tables = Tables()
    for scenario in scenarios_:
        outcome = iso.replay(
            trace,
            scenario.policy,
            scenario.capacity_blocks,
            options,
            scenario.isolation,
            settings.quota_file,
        )
        tokens = hit_tokens(trace, outcome.hit_blocks)
        cross = cross_tokens(trace, outcome)
        base = _base_row(
            trace, scenario, settings, _option_text(scenario.policy, settings, options)
        )
        for window in settings.windows:
            tables.hit_rates += _window_rows(trace, scenario, outcome, tokens, cross, window, base)
        tables.timeseries += _timeseries(trace, scenario, tokens, settings.bucket_s)
        if settings.outcomes:
            tables.outcomes.append(_outcomes(trace, scenario, outcome, tokens, cross))
    return tables


def _base_row(trace: Trace, s: Scenario, settings: Settings, option_text: str | None) -> dict:
    cap = s.capacity_blocks
    return {
        "policy": s.policy,
        "policy_options": option_text,
        "isolation": s.isolation,
        "capacity_blocks": cap,
        "capacity_tokens": None if cap is None else cap * trace.block_size,
        "capacity_gib": s.capacity_gib,
        "model": settings.model if s.capacity_gib is not None else None,
        "kv_dtype": settings.kv_dtype if s.capacity_gib is not None else None,
        "block_size": trace.block_size,
    }


def _groups(trace: Trace, measured: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """The fleet, then each tenant with measured requests: (name, request mask)."""
    out = [(FLEET, measured)]
    for code, name in enumerate(trace.tenants):
        mask = measured & (trace.tenant_codes == code)
        if mask.any():
            out.append((name, mask))
    return out


def _window_rows(trace, s, outcome, tokens, cross, window, base) -> list[dict]:  # type: ignore[no-untyped-def]
    steady_flag, warmup, ci_wanted = None, 0, window == STEADY
    if window == STEADY:
        wu = warm_up(tokens, trace.input_tokens, outcome.filled_at, POLICIES[s.policy].bounded)
        measured = np.arange(trace.n_requests) >= wu.end
        steady_flag, warmup = wu.filled, wu.end
    else:
        measured = WINDOWS[window](trace)
    rows = []
    groups = _groups(trace, measured) if measured.any() else [(FLEET, measured)]
    for name, mask in groups:
        n = int(mask.sum())
        inp, hit = int(trace.input_tokens[mask].sum()), int(tokens[mask].sum())
        hit_requests = int((outcome.hit_blocks[mask] > 0).sum())
        ci = batch_means_ci(tokens[mask], trace.input_tokens[mask]) if ci_wanted else None
        reported = not ci_wanted or bool(steady_flag)
        rows.append(
            {
                **base,
                "tenant": name,
                "measure_window": window,
                "requests": n,
                "input_tokens": inp,
                "hit_tokens": hit,
                "cross_tenant_hit_tokens": int(cross[mask].sum()),
                "hit_requests": hit_requests,
                "token_hit_rate": hit / inp if inp and reported else None,
                "request_hit_rate": hit_requests / n if n and reported else None,
                "warmup_requests": warmup if ci_wanted else None,
                "steady": steady_flag,
                "ci_low": ci[0] if ci and reported else None,
                "ci_high": ci[1] if ci and reported else None,
            }
        )
    return rows


def _timeseries(trace: Trace, s: Scenario, tokens: np.ndarray, bucket_s: float) -> list[dict]:
    if bucket_s <= 0:
        raise ValueError(f"bucket must be positive, got {bucket_s} s")
    bucket = np.floor(trace.times / bucket_s).astype(np.int64)
    rows = []
    for name, mask in _groups(trace, np.ones(trace.n_requests, dtype=bool)):
        b = bucket[mask]
        n = np.bincount(b)
        inp = np.bincount(b, weights=trace.input_tokens[mask]).astype(np.int64)
        hit = np.bincount(b, weights=tokens[mask]).astype(np.int64)
        for i in np.flatnonzero(n):
            rows.append(
                {
                    "tenant": name,
                    "policy": s.policy,
                    "isolation": s.isolation,
                    "capacity_blocks": s.capacity_blocks,
                    "bucket_start": int((trace.start_s + i * bucket_s) * 1e6),
                    "bucket_seconds": float(bucket_s),
                    "requests": int(n[i]),
                    "input_tokens": int(inp[i]),
                    "hit_tokens": int(hit[i]),
                    "token_hit_rate": float(hit[i] / inp[i]) if inp[i] else None,
                }
            )
    return rows


def _outcomes(trace, s, outcome, tokens, cross) -> pa.Table:  # type: ignore[no-untyped-def]
    n_blocks = trace.blocks_per_request
    first_miss = np.where(outcome.hit_blocks < n_blocks, outcome.hit_blocks, -1)
    return pa.table(
        {
            "request_id": trace.request_ids
            if trace.request_ids is not None
            else pa.array([str(i) for i in range(trace.n_requests)]),
            "tenant": pa.array([trace.tenants[c] for c in trace.tenant_codes], pa.string()),
            "policy": pa.array([s.policy] * trace.n_requests),
            "isolation": pa.array([s.isolation] * trace.n_requests),
            "capacity_blocks": pa.array([s.capacity_blocks] * trace.n_requests, pa.int64()),
            "input_tokens": pa.array(trace.input_tokens),
            "hit_blocks": pa.array(outcome.hit_blocks, pa.int32()),
            "hit_tokens": pa.array(tokens),
            "first_miss_block": pa.array(first_miss.astype(np.int32), mask=first_miss < 0),
            "cross_tenant_hit_tokens": pa.array(cross),
        },
        schema=OUTCOMES_SCHEMA,
    )


def write_tables(con: duckdb.DuckDBPyConnection, tables: Tables, run_id: str) -> int:
    """Append the tables under ``run_id``; returns the number of hit-rate rows."""
    hit_rates, timeseries, outcomes = tables.arrow()
    for name, table in (
        ("hit_rates", hit_rates),
        ("hit_rate_timeseries", timeseries),
        ("request_outcomes", outcomes),
    ):
        if table.num_rows == 0:
            continue
        con.register("new_rows", table)
        try:
            con.execute(f"INSERT INTO {name} BY NAME SELECT ? AS run_id, * FROM new_rows", [run_id])
        finally:
            con.unregister("new_rows")
    return hit_rates.num_rows


@dataclass(frozen=True)
class Capacities:
    """Capacity flags as given: at most one of them, each a list."""

    blocks: Sequence[int] | None = None
    tokens: Sequence[int] | None = None
    gib: Sequence[float] | None = None
    model: str | None = None
    model_config: str | None = None
    kv_dtype: str = "bf16"

    def resolve(self, block_size: int) -> tuple[list[int], list[float | None]]:
        """Capacities in blocks (whole blocks only: rounded down), and the GiB each came from."""
        given = [x for x in (self.blocks, self.tokens, self.gib) if x]
        if len(given) > 1:
            raise ValueError("give capacities in blocks, tokens or GiB, not several")
        if self.tokens:
            small = [t for t in self.tokens if t < block_size]
            if small:
                raise ValueError(
                    f"capacity {small[0]} tokens is less than one block ({block_size})"
                )
            return [t // block_size for t in self.tokens], [None] * len(self.tokens)
        if self.gib:
            shape = resolve_model(self.model, self.model_config)
            blocks = [shape.blocks_in(g, block_size, self.kv_dtype) for g in self.gib]
            if min(blocks) < 1:
                raise ValueError(
                    f"{min(self.gib)} GiB holds no block of {block_size} tokens of {shape.name}"
                )
            return blocks, [float(g) for g in self.gib]
        return list(self.blocks or []), [None] * len(self.blocks or [])

    @property
    def model_name(self) -> str | None:
        if not self.gib:
            return None
        return resolve_model(self.model, self.model_config).name


def capacities_in_blocks(
    block_size: int, capacity_blocks: Sequence[int] | None, capacity_tokens: Sequence[int] | None
) -> list[int]:
    """Capacities in blocks; a token capacity holds only whole blocks (rounded down)."""
    return Capacities(capacity_blocks, capacity_tokens).resolve(block_size)[0]


def run_simulation(
    con: duckdb.DuckDBPyConnection,
    policies: Sequence[str],
    capacities: Capacities | None = None,
    settings: Settings | None = None,
    isolations: Sequence[str] = ("shared",),
    parameters: dict[str, object] | None = None,
) -> pa.Table:
    """Load the warehouse's trace, simulate every scenario, store and return the hit rates."""
    capacities = capacities or Capacities()
    settings = settings or Settings()
    parameters = parameters or {
        "policies": list(policies),
        "isolations": list(isolations),
        "capacities": capacities.__dict__,
        "settings": settings.__dict__,
    }
    with recorded_run(con, "simulate", parameters) as run_id:
        scenarios(
            policies,
            [1] if capacities.blocks or capacities.tokens or capacities.gib else [],
            isolations,
        )  # names first, before any work
        check_windows(settings.windows)
        trace = load_trace(con)
        blocks, gibs = capacities.resolve(trace.block_size)
        settings = replace(
            settings,
            model=capacities.model_name,
            kv_dtype=capacities.kv_dtype if capacities.gib else None,
        )
        tables = simulate_grid(trace, scenarios(policies, blocks, isolations, gibs), settings)
        write_tables(con, tables, run_id)
    return tables.arrow()[0]
