"""The short answer a run prints first (at most :data:`MAX_LINES` lines) and publishes as
markdown: the ceiling, each policy's token hit rate at the capacity that matters (the priced
one), the gap to the optimum, shared against salted caches, the planner's answer, what the cache
saves, then where the page and the warehouse are and one query to start from. The full tables
are on the page and in the warehouse.

Reads the views ``trace_summary``, ``latest_hit_rates``, ``latest_savings``, ``latest_plan``
and ``latest_plan_slo_answers`` (the fleet in GPUs that meets the SLO, in place of the
hit-rate plan's fleet); every figure is the fleet's over the whole trace (window ``all``, as the
planner and the savings measure it).
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from prefixscope.analysis.trace.measure import FLEET
from prefixscope.dashboards.plan import sentences
from prefixscope.dashboards.plan_slo import disagg_from_warehouse as split_sentences
from prefixscope.dashboards.plan_slo import from_warehouse as slo_sentences
from prefixscope.dashboards.savings import priced_on
from prefixscope.dashboards.views import read_view, trace_summary

MAX_LINES = 17
WIDTH = 100
LABEL = 11  # the label column: "warehouse: "
WINDOW = "all"
OPTIMUM = "belady"
#: The policy the gap and the isolations are told for when nothing was priced.
LEAD_POLICY = "lru"
TENANTS_NAMED = 5
QUERY = (
    "SELECT tenant, isolation, policy, capacity_blocks, token_hit_rate FROM latest_hit_rates "
    "WHERE measure_window = 'all' ORDER BY ALL"
)


@dataclass(frozen=True)
class Item:
    label: str
    text: str
    optional: bool = False  # left off a terminal that has no room for it (the page has it)


@dataclass(frozen=True)
class Summary:
    items: tuple[Item, ...]
    page: str
    warehouse: str  # as given: the query names it so
    query: str = QUERY

    def lines(self) -> list[str]:
        """The terminal's lines, each item wrapped under its label; optional items, last first,
        are left off until they fit in :data:`MAX_LINES`."""
        tail = [
            f"{'page:':<{LABEL}}{Path(self.page).resolve()}",
            f"{'warehouse:':<{LABEL}}{Path(self.warehouse).resolve()} "
            "(every table; views latest_*, run_history)",
            f'{"query:":<{LABEL}}duckdb {self.warehouse} "{self.query}"',
        ]
        wrapped = [
            (
                item,
                textwrap.wrap(
                    item.text,
                    WIDTH,
                    initial_indent=f"{item.label + ':':<{LABEL}}",
                    subsequent_indent=" " * LABEL,
                ),
            )
            for item in self.items
        ]
        budget = MAX_LINES - len(tail)
        for item, lines in reversed(list(wrapped)):
            if sum(len(w) for _, w in wrapped) <= budget:
                break
            if item.optional:
                wrapped.remove((item, lines))
        return [line for _, lines in wrapped for line in lines][:budget] + tail

    def text(self) -> str:
        return "\n".join(self.lines())

    def markdown(self) -> str:
        """The same summary as a markdown artifact: one bullet an item, unshortened."""
        bullets = [f"- **{item.label}**: {item.text}" for item in self.items]
        return "\n".join(
            [
                "## prefixscope fleet report",
                "",
                *bullets,
                "",
                f"Page: `{Path(self.page).resolve()}`; warehouse: "
                f"`{Path(self.warehouse).resolve()}` (every table; views `latest_*`, "
                "`run_history`). A query to start from:",
                "",
                "```sh",
                f'duckdb {self.warehouse} "{self.query}"',
                "```",
                "",
            ]
        )


def summarize(con: duckdb.DuckDBPyConnection, page: str | Path, warehouse: str | Path) -> Summary:
    """The summary of the warehouse behind ``con`` (its latest results)."""
    rates = read_view(con, "latest_hit_rates").filter(
        (pl.col("measure_window") == WINDOW) & pl.col("policy_options").is_null()
    )
    priced = next(
        (r for r in read_view(con, "latest_savings").iter_rows(named=True) if r["tenant"] == FLEET),
        None,
    )
    items = [_trace(trace_summary(con), rates)]
    items += _rates(rates, priced)
    plan = sentences(read_view(con, "latest_plan").to_dicts())
    if plan:
        items.append(Item("plan", plan[0]))
        fleet = [s for s in plan if s.startswith(("The cheapest", "No simulated fleet"))]
        slo = slo_sentences(con, brief=True)
        items += [Item("fleet", s, optional=True) for s in fleet[:1] if not slo]
        items += [Item("SLO", s) for s in slo]
        items += [Item("split", s, optional=True) for s in split_sentences(con, brief=True)]
    if priced is not None:
        items.append(_saves(priced))
    return Summary(tuple(i for i in items if i.text), str(page), str(warehouse))


# --- the items --------------------------------------------------------------------------------


def _trace(summary: dict[str, Any], rates: pl.DataFrame) -> Item:
    by_size = (
        rates.filter((pl.col("tenant") != FLEET) & (pl.col("isolation") == "shared"))
        .group_by("tenant")
        .agg(pl.col("requests").max())
        .sort(["requests", "tenant"], descending=[True, False])
    )
    names = by_size["tenant"].to_list()
    tenants = summary["tenants"]
    head = (
        f"{summary['requests']:,} requests ({summary['rejected_lines']:,} lines rejected) from "
        f"{summary['files']:,} file{'s' if summary['files'] != 1 else ''}, {tenants:,} "
        f"tenant{'s' if tenants != 1 else ''}"
    )
    # the largest tenants, as many as fit on the line (at most TENANTS_NAMED): a line saved
    # here is one the answer keeps below
    for k in range(min(len(names), TENANTS_NAMED), 0, -1):
        named = ", ".join(names[:k]) + (", …" if len(names) > k else "")
        if LABEL + len(f"{head}: {named}") <= WIDTH or k == 1:
            break
    return Item("trace", head + (f": {named}" if tenants > 1 and names else ""))


def _rates(rates: pl.DataFrame, priced: dict[str, Any] | None) -> list[Item]:
    """The ceiling, each policy at the priced capacity, the gap to the optimum, and the
    isolations."""
    fleet = rates.filter(pl.col("tenant") == FLEET)
    shared = fleet.filter(pl.col("isolation") == "shared")
    if shared.is_empty():
        return []
    ceiling = _rate(shared, "ceiling", None)
    items = []
    if ceiling is not None:
        items.append(
            Item("ceiling", f"{ceiling:.2%} of prompt tokens hit a cache that never evicts "
                 "(the fleet, the whole trace)")
        )  # fmt: skip
    capacity = _capacity(shared, priced)
    if capacity is None:
        return items
    lead = priced["policy"] if priced is not None else LEAD_POLICY
    at = shared.filter(pl.col("capacity_blocks") == capacity)
    policies = sorted(at["policy"].to_list(), key=lambda p: (p == OPTIMUM, p != lead, p))
    tokens = at["capacity_tokens"][0]
    items.append(
        Item(
            "policies",
            f"at {capacity:,} blocks ({tokens / 1e6:,.1f} M tokens): "
            + ", ".join(f"{p} {_pct(_rate(at, p, capacity))}" for p in policies),
        )
    )
    optimum = _rate(at, OPTIMUM, capacity)
    best, name = (optimum, f"{OPTIMUM}, the offline optimum") if optimum is not None else (
        ceiling, "the ceiling"
    )  # fmt: skip
    if best is not None:
        gaps = [
            f"{p} {(best - r) * 100:.2f}"
            for p in policies
            if p != OPTIMUM and (r := _rate(at, p, capacity)) is not None
        ]
        items.append(Item("gap", f"to {name} ({best:.2%}), in points: " + ", ".join(gaps)))
    items += _isolations(fleet, lead, capacity)
    return items


def _isolations(fleet: pl.DataFrame, policy: str, capacity: int) -> list[Item]:
    at = fleet.filter((pl.col("policy") == policy) & (pl.col("capacity_blocks") == capacity))
    by_mode = {r["isolation"]: r for r in at.iter_rows(named=True)}
    shared = by_mode.get("shared")
    if shared is None or len(by_mode) < 2:
        return []
    base = shared["token_hit_rate"]
    others = [
        f"{mode} {_pct(r['token_hit_rate'])}"
        + ("" if None in (base, r["token_hit_rate"]) else
           f" ({(r['token_hit_rate'] - base) * 100:+.3f} pt)")
        for mode, r in by_mode.items()
        if mode != "shared"
    ]  # fmt: skip
    cross = shared["cross_tenant_hit_tokens"]
    return [
        Item(
            "tenants",
            f"{policy} shared {_pct(shared['token_hit_rate'])}, {', '.join(others)}; "
            f"{cross / 1e6:,.2f} M tokens hit other tenants' blocks",
        )
    ]


def _saves(r: dict[str, Any]) -> Item:
    cap = "unbounded" if r["capacity_blocks"] is None else f"{r['capacity_blocks']:,} blocks"
    per_hour = r["gpu_seconds_saved_per_hour"]
    usd = r.get("usd_saved_per_hour")
    dollars = "" if usd is None or per_hour is None else f" (${usd:,.2f})"
    saved = (
        f"{r['gpu_seconds_saved']:,.1f} prefill GPU-s"
        if per_hour is None
        else f"{per_hour:,.1f} prefill GPU-s{dollars} an hour"
    )
    share = "" if r["saved_share"] is None else f" ({r['saved_share']:.1%})"
    return Item(
        "saves",
        f"{saved}{share}; TTFT p50 {_ms_pair(r['ttft_p50_no_cache_s'], r['ttft_p50_with_cache_s'])}"
        f", p95 {_ms_pair(r['ttft_p95_no_cache_s'], r['ttft_p95_with_cache_s'])} "
        f"({r['policy']} {r['isolation']} at {cap}{_on(r)}, {r['cost_model']})",
    )


def _on(r: dict[str, Any]) -> str:
    """What the savings were priced on: the deployment whose whole KV pool is the capacity
    priced, or the deployment (or GPU) beside a smaller capacity."""
    if r.get("deployment") and r["capacity_blocks"] == r["kv_pool_blocks"]:
        return f", the whole KV pool of {r['deployment']} serving {r['model']}"
    return f"; {r['model']} on {priced_on(r)}"


# --- helpers ----------------------------------------------------------------------------------


def _capacity(shared: pl.DataFrame, priced: dict[str, Any] | None) -> int | None:
    """The priced capacity, else the middle of the simulated ones."""
    cap = None if priced is None else priced["capacity_blocks"]
    if cap is not None and (shared["capacity_blocks"] == cap).any():
        return int(cap)
    caps = sorted(shared["capacity_blocks"].drop_nulls().unique().to_list())
    return caps[len(caps) // 2] if caps else None


def _rate(rows: pl.DataFrame, policy: str, capacity: int | None) -> float | None:
    found = rows.filter(
        (pl.col("policy") == policy)
        & (
            pl.col("capacity_blocks").is_null()
            if capacity is None
            else pl.col("capacity_blocks") == capacity
        )
    )
    return None if found.is_empty() else found["token_hit_rate"][0]


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:.2%}"


def _ms_pair(before: float, after: float) -> str:
    """Two times in milliseconds, one unit: ``261 → 214 ms``."""
    return f"{before * 1e3:,.0f} → {_ms(after)}"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.0f} ms"
