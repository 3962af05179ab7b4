"""Replay a trace through policies and capacities and summarize the hit rates.

``simulate_grid`` is pure (trace in, table out) so it can run anywhere a trace can be shipped;
``write_hit_rates`` is the only step that touches the warehouse.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa

from prefixscope.analysis.policies import POLICIES
from prefixscope.analysis.trace import Trace, load_trace
from prefixscope.analysis.windows import WINDOWS
from prefixscope.warehouse import FLEET, recorded_run

HIT_RATES_SCHEMA = pa.schema(
    [
        ("tenant", pa.string()),
        ("policy", pa.string()),
        ("capacity_blocks", pa.int64()),
        ("capacity_tokens", pa.int64()),
        ("block_size", pa.int32()),
        ("measure_window", pa.string()),
        ("requests", pa.int64()),
        ("input_tokens", pa.int64()),
        ("hit_tokens", pa.int64()),
        ("hit_requests", pa.int64()),
        ("token_hit_rate", pa.float64()),
        ("request_hit_rate", pa.float64()),
    ]
)


@dataclass(frozen=True)
class Scenario:
    """One cache configuration: a policy and, for bounded policies, a capacity in blocks."""

    policy: str
    capacity_blocks: int | None


def scenarios(policies: Iterable[str], capacities_blocks: Sequence[int]) -> list[Scenario]:
    """Every policy at every capacity; an unbounded policy once, without capacity."""
    out: list[Scenario] = []
    for name in policies:
        if name not in POLICIES:
            raise ValueError(f"unknown policy {name!r}; known: {', '.join(sorted(POLICIES))}")
        if POLICIES[name].bounded:
            if not capacities_blocks:
                raise ValueError(f"policy {name!r} needs at least one capacity")
            out += [Scenario(name, int(c)) for c in capacities_blocks]
        else:
            out.append(Scenario(name, None))
    for s in out:
        if s.capacity_blocks is not None and s.capacity_blocks < 1:
            raise ValueError(f"capacity must be at least one block, got {s.capacity_blocks}")
    return out


def check_windows(windows: Sequence[str]) -> None:
    unknown = [w for w in windows if w not in WINDOWS]
    if unknown:
        raise ValueError(f"unknown window {unknown[0]!r}; known: {', '.join(WINDOWS)}")


def hit_tokens(trace: Trace, hit_blocks: np.ndarray) -> np.ndarray:
    """Tokens served from cache per request: ``block_size`` per hit block, capped at
    ``input_tokens``. When a hash-id trace's partial last block hits, it so counts its own
    tokens; token sources never hash a partial tail, so it is never served from cache."""
    return np.minimum(hit_blocks.astype(np.int64) * trace.block_size, trace.input_tokens)


def summarize(
    trace: Trace, scenario: Scenario, hit_blocks: np.ndarray, window: str
) -> list[dict[str, object]]:
    """Hit-rate rows (fleet first, then each tenant) for one scenario and window."""
    measured = WINDOWS[window](trace)
    tokens = hit_tokens(trace, hit_blocks)
    codes = trace.tenant_codes[measured]
    k = len(trace.tenants)

    def per_tenant(values: np.ndarray) -> np.ndarray:
        out = np.zeros(k, dtype=np.int64)
        np.add.at(out, codes, values[measured].astype(np.int64))
        return out

    requests = np.bincount(codes, minlength=k).astype(np.int64)
    inputs = per_tenant(trace.input_tokens)
    hits = per_tenant(tokens)
    hit_requests = per_tenant((hit_blocks > 0).astype(np.int64))
    groups = [(FLEET, requests.sum(), inputs.sum(), hits.sum(), hit_requests.sum())]
    groups += [
        (name, requests[i], inputs[i], hits[i], hit_requests[i])
        for i, name in enumerate(trace.tenants)
        if requests[i] > 0
    ]
    cap = scenario.capacity_blocks
    return [
        {
            "tenant": tenant,
            "policy": scenario.policy,
            "capacity_blocks": cap,
            "capacity_tokens": None if cap is None else cap * trace.block_size,
            "block_size": trace.block_size,
            "measure_window": window,
            "requests": int(n),
            "input_tokens": int(inp),
            "hit_tokens": int(hit),
            "hit_requests": int(hreq),
            "token_hit_rate": float(hit / inp) if inp else None,
            "request_hit_rate": float(hreq / n) if n else None,
        }
        for tenant, n, inp, hit, hreq in groups
    ]


def simulate_grid(trace: Trace, scenarios_: Sequence[Scenario], windows: Sequence[str]) -> pa.Table:
    """Replay ``trace`` once per scenario and measure it over every window."""
    check_windows(windows)
    rows: list[dict[str, object]] = []
    for scenario in scenarios_:
        hits = POLICIES[scenario.policy].hit_blocks(trace, scenario.capacity_blocks)
        for window in windows:
            rows += summarize(trace, scenario, hits, window)
    return pa.Table.from_pylist(rows, schema=HIT_RATES_SCHEMA)


def write_hit_rates(con: duckdb.DuckDBPyConnection, table: pa.Table, run_id: str) -> int:
    """Append ``table`` (``HIT_RATES_SCHEMA``) to ``hit_rates`` under ``run_id``."""
    con.register("new_hit_rates", table)
    try:
        con.execute(
            "INSERT INTO hit_rates BY NAME SELECT ? AS run_id, * FROM new_hit_rates", [run_id]
        )
    finally:
        con.unregister("new_hit_rates")
    return table.num_rows


def capacities_in_blocks(
    block_size: int, capacity_blocks: Sequence[int] | None, capacity_tokens: Sequence[int] | None
) -> list[int]:
    """Capacities in blocks; a token capacity holds only whole blocks (rounded down)."""
    if capacity_blocks and capacity_tokens:
        raise ValueError("give capacities in blocks or in tokens, not both")
    if capacity_tokens:
        too_small = [t for t in capacity_tokens if t < block_size]
        if too_small:
            raise ValueError(
                f"capacity {too_small[0]} tokens is less than one block ({block_size})"
            )
        return [t // block_size for t in capacity_tokens]
    return list(capacity_blocks or [])


def run_simulation(
    con: duckdb.DuckDBPyConnection,
    policies: Sequence[str],
    capacity_blocks: Sequence[int] | None = None,
    capacity_tokens: Sequence[int] | None = None,
    windows: Sequence[str] = ("all",),
    parameters: dict[str, object] | None = None,
) -> pa.Table:
    """Load the warehouse's trace, simulate every policy × capacity, store and return the rows."""
    params = parameters or {
        "policies": list(policies),
        "capacity_blocks": capacity_blocks,
        "capacity_tokens": capacity_tokens,
        "windows": list(windows),
    }
    with recorded_run(con, "simulate", params) as run_id:
        scenarios(policies, [1] if capacity_blocks or capacity_tokens else [])  # names first
        check_windows(windows)
        trace = load_trace(con)
        caps = capacities_in_blocks(trace.block_size, capacity_blocks, capacity_tokens)
        table = simulate_grid(trace, scenarios(policies, caps), windows)
        write_hit_rates(con, table, run_id)
    return table
