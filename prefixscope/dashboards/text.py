"""Hit rates as a short text table, for terminals and logs."""

from __future__ import annotations

import polars as pl
import pyarrow as pa

from prefixscope.analysis.fleet.budget import top_lever
from prefixscope.analysis.trace.measure import FLEET
from prefixscope.dashboards.savings import dollars
from prefixscope.dashboards.tiers import tier_verdict
from prefixscope.dashboards.views import delayed_routers
from prefixscope.terminal import More, clip

#: Above this many tenants a terminal table shows the fleet rows only.
MAX_TENANTS_SHOWN = 6


def format_hit_rates(table: pa.Table, more: More | None = None) -> str:
    """``hit_rates`` rows grouped by window, fleet first, then by policy and capacity; on a
    terminal (``more``) at most ``terminal.MAX_ROWS`` of them."""
    df = pl.from_arrow(table)
    assert isinstance(df, pl.DataFrame)
    tenants = df.filter(pl.col("tenant") != FLEET)["tenant"].n_unique()
    if tenants > MAX_TENANTS_SHOWN or tenants == 1:  # one tenant's rows repeat the fleet's
        df = df.filter(pl.col("tenant") == FLEET)
    df = df.sort(
        [
            pl.col("measure_window"),
            pl.col("tenant") != FLEET,
            pl.col("tenant"),
            pl.col("policy"),
            *([pl.col("isolation")] if "isolation" in df.columns else []),
            pl.col("capacity_blocks"),
        ],
        nulls_last=False,
    )
    shared_only = "isolation" not in df.columns or set(df["isolation"].to_list()) == {"shared"}
    header = (
        f"{'window':<10} {'tenant':<12} {'policy':<8} "
        + ("" if shared_only else f"{'isolation':<11} ")
        + f"{'capacity':>12} {'requests':>9} {'token hit':>9} {'req hit':>8}"
    )
    lines = []
    for r in df.iter_rows(named=True):
        cap = "inf" if r["capacity_blocks"] is None else f"{r['capacity_blocks']:,} blk"
        tenant = "fleet" if r["tenant"] == FLEET else r["tenant"][:12]
        mode = "" if shared_only else f"{r['isolation']:<11} "
        rate = _num(r["token_hit_rate"], 9)
        if r.get("ci_low") is not None:
            rate += f"  (95% CI {r['ci_low']:.4f}-{r['ci_high']:.4f}, from request "
            rate += f"{r['warmup_requests']:,})"
        elif r.get("steady") is False:
            rate += "  (the cache never filled: no steady state)"
        lines.append(
            f"{r['measure_window']:<10} {tenant:<12} {r['policy']:<8} {mode}{cap:>12} "
            f"{r['requests']:>9,} {rate[:9]} {_num(r['request_hit_rate'], 8)}{rate[9:]}"
        )
    return "\n".join([header, *clip(lines, more)])


def _num(x: float | None, width: int) -> str:
    return f"{'—':>{width}}" if x is None else f"{x:>{width}.4f}"


#: Capacities a terminal shows of a curve: about this many, log-spaced.
CURVE_ROWS_SHOWN = 10


def format_curve(table: pa.Table) -> str:
    """The fleet's rows of an ``mrc`` table at a few log-spaced capacities, per window."""
    df = pl.from_arrow(table)
    assert isinstance(df, pl.DataFrame)
    if df.is_empty():
        return "no curve rows"
    lines = []
    tenants = df.filter(pl.col("tenant") != FLEET)["tenant"].n_unique()
    for (window,), rows in df.filter(pl.col("tenant") == FLEET).group_by(
        ["measure_window"], maintain_order=True
    ):
        rows = rows.sort("capacity_blocks")
        first = rows.row(0, named=True)
        by = f" by {first['sample_by']}" if first.get("sample_by") else ""
        kind = "exact" if first["exact"] else f"sampled{by} at {first['sample_rate']:g}"
        if first.get("sampled_blocks") is not None:
            kind += f", {first['sampled_blocks']:,} sampled blocks"
        lines.append(
            f"{first['policy']} ({first['isolation']}, {first['method']}, {kind}), window "
            f"{window}: {rows.height} capacities, fleet and {tenants} tenant(s)"
        )
        step = max(1, rows.height // CURVE_ROWS_SHOWN)
        shown = rows[::step] if rows.height <= step * CURVE_ROWS_SHOWN else rows[::step]
        shown = pl.concat([shown, rows[-1:]]).unique("capacity_blocks", maintain_order=True)
        for r in shown.iter_rows(named=True):
            gib = "" if r["capacity_gib"] is None else f"  {r['capacity_gib']:10.2f} GiB"
            rate = "—" if r["token_hit_rate"] is None else f"{r['token_hit_rate']:.2%}"
            band = ""
            if r.get("ci_low") is not None:  # a block sample's 95% interval
                band = f"  (95% {r['ci_low']:.2%}–{r['ci_high']:.2%})"
            lines.append(f"  {r['capacity_blocks']:>12,} blocks{gib}  {rate:>8}{band}")
    return "\n".join(lines)


def format_fleet(table: pa.Table, more: More | None = None) -> str:
    """``fleet_hit_rates`` fleet rows: per window, replica count, deployment, capacity and
    load, one line per router with its hit rate beside what it costs in TTFT and balance.
    ``HBM`` says whether the capacity fits the deployment's KV pool (``ok``), exceeds it (a
    what-if, ``over``) or cannot be judged (``—``: a GPU without an HBM figure)."""
    df = pl.from_arrow(table)
    assert isinstance(df, pl.DataFrame)
    df = df.filter(pl.col("tenant") == FLEET).sort(
        ["measure_window", "replicas", "deployment", "capacity_blocks", "dram_blocks",
         "store_unbounded", "store_blocks", "load_scale", "router",
         *[c for c in ("router_delay_ms", "engine") if c in df.columns]],
        nulls_last=False,
    )  # fmt: skip
    df = delayed_routers(df)
    tiered = bool(df["dram_blocks"].max()) or df["store_gbps"].drop_nulls().len() > 0
    # the engine's column only when some row runs a KV pool (an ideal-only run reads as before)
    pooled = "engine" in df.columns and bool((df["engine"].fill_null("ideal") != "ideal").any())
    header = [
        f"{'window':<10} {'replicas':>8} {'deployment':<10} {'capacity':>12} {'HBM':>4} "
        + (f"{'DRAM':>10} {'store':>10} " if tiered else "")
        + f"{'load':>5} {'router':<13} "
        + (f"{'engine':<7} {'preempt':>7} " if pooled else "")
        + f"{'token hit':>9} {'ceiling':>8} {'TTFT p50':>9} {'p95':>8} {'p99':>8} {'imbalance':>9}"
        + f" {'$ saved/h':>10}"
        + (f" {'tier saves':>10} {'tier costs':>10} {'net $/h':>9}" if tiered else "")
    ]
    lines = []
    for r in df.iter_rows(named=True):
        tiers = f"{_tier(r['dram_blocks'] or None):>10} {_store(r):>10} " if tiered else ""
        eng = f"{r['engine'] or 'ideal':<7} {r['preemptions'] or 0:>7,} " if pooled else ""
        lines.append(
            f"{r['measure_window']:<10} {r['replicas']:>8} {r['deployment'] or '—':<10} "
            f"{r['capacity_blocks']:>8,} blk {_hbm(r['exceeds_hbm']):>4} "
            f"{tiers}{r['load_scale']:>4g}x {r['router']:<13} "
            f"{eng}{_num(r['token_hit_rate'], 9)} {_num(r['ceiling_token_hit_rate'], 8)} "
            f"{_seconds(r['ttft_p50_s'], 9)} {_seconds(r['ttft_p95_s'], 8)} "
            f"{_seconds(r['ttft_p99_s'], 8)} {_num(r['load_imbalance'], 9)}"
            f" {dollars(r.get('usd_saved_per_hour')):>10}"
            + (
                f" {dollars(r.get('tier_usd_saved_per_hour')):>10}"
                f" {dollars(r.get('tier_usd_per_hour')):>10}"
                f" {dollars(r.get('tier_net_usd_per_hour')):>9}"
                if tiered
                else ""
            )
        )
    notes = [tier_verdict(_one_window(df))] if tiered else []
    return "\n".join([*header, *clip(lines, more), *(n for n in notes if n)])


def _one_window(df: pl.DataFrame) -> pl.DataFrame:
    """The rows of one window, to judge tiers once: steady where measured, else the first."""
    windows = df["measure_window"].unique(maintain_order=True).to_list()
    keep = "steady" if "steady" in windows and df["token_hit_rate"].is_not_null().any() else None
    return df.filter(pl.col("measure_window") == (keep or windows[0]))


def _hbm(exceeds: bool | None) -> str:
    return "—" if exceeds is None else ("over" if exceeds else "ok")


def _tier(blocks: int | None) -> str:
    return "—" if blocks is None else f"{blocks:,} blk"


def _store(row: dict) -> str:
    if row["store_unbounded"]:
        return "unbounded"
    return _tier(row["store_blocks"])


def _seconds(x: float | None, width: int) -> str:
    return f"{'—':>{width}}" if x is None else f"{x:>{width - 1}.3f}s"


#: How the terminal names the miss budget's parts (``fleet/budget.py``).
BUDGET_LABELS = {
    "hit_hbm": "hit HBM", "hit_dram": "hit DRAM", "hit_store": "hit store",
    "always_computed": "always computed", "never_seen": "never seen",
    "slower_tier_recomputed": "tier recomputed", "behind_a_miss": "behind a miss",
    "other_replica": "other replica", "evicted": "evicted", "not_yet_cached": "not yet cached",
    "stale_router_view": "stale router view",
}  # fmt: skip


def format_budget(table: pa.Table, more: More | None = None) -> str:
    """``miss_budget``'s fleet rows of the first window: one line per configuration, its parts
    above 0.05% largest first, and the lever that would win back the most tokens."""
    df = pl.from_arrow(table)
    assert isinstance(df, pl.DataFrame)
    if df.is_empty():
        return ""
    window = df["measure_window"][0]
    keys = ["replicas", "deployment", "capacity_blocks", "dram_blocks", "store_unbounded",
            "store_blocks", "load_scale", "router", "engine", "policy"]  # fmt: skip
    df = df.filter((pl.col("tenant") == FLEET) & (pl.col("measure_window") == window))
    delay = ["router_delay_ms"] if "router_delay_ms" in df.columns else []
    order = [*keys[:8], *delay, *keys[8:]]
    df = delayed_routers(df.sort(order, nulls_last=False, maintain_order=True))
    lines = [f"where the prompt tokens went (window {window}, fleet):"]
    for key, rows in df.group_by(keys, maintain_order=True):
        shares = sorted((r["share"] or 0.0, r["part"]) for r in rows.iter_rows(named=True))
        shown = " · ".join(f"{BUDGET_LABELS[p]} {s:.1%}" for s, p in shares[::-1] if s >= 5e-4)
        top = top_lever(rows)
        best = ""
        if top is not None:
            worth = "" if top["gpu_seconds"] is None else f", {top['gpu_seconds']:,.0f} GPU-s"
            best = f"; most to win back: {top['lever']} ({top['share']:.1%} of the tokens{worth})"
        name = f"{key[0]} × {key[2]:,} blk {key[7]} {key[8]} {key[6]:g}x"
        lines.append(f"  {name}: {shown}{best}")
    return "\n".join([lines[0], *clip(lines[1:], more)])


def format_warm_start(rows: pa.Table) -> str:
    """What a warm start replayed before the measured requests ("" for a cold start)."""
    if rows.num_rows == 0 or "warm_start" not in rows.column_names:
        return ""
    start, n = rows["warm_start"][0].as_py(), rows["warm_requests"][0].as_py()
    if start in (None, "cold"):
        return ""
    what = "blocks the engine held" if start == "events" else "requests of the first window"
    return f"warm start {start}: {n:,} {what} replayed first, never measured\n"


def format_disagg(table: pa.Table) -> str:
    """``disagg_fleets`` rows: the disaggregated fleet and the colocated one of the same GPUs,
    a line each, with the TTFT and TPOT each gives and what each pool is busy."""
    lines = [
        f"{'layout':<38} {'GPUs':>5} {'token hit':>9} {'TTFT p50':>9} {'p95':>8} {'p99':>8} "
        f"{'TPOT p50':>9} {'p95':>8} {'KV move p95':>11} {'wait p95':>9} {'busy':>11}"
    ]
    notes = []
    for r in table.to_pylist():
        if r["layout"] == "disaggregated":
            name = (
                f"{r['prefill_replicas']} × {r['prefill_deployment']} → "
                f"{r['decode_replicas']} × {r['decode_deployment']}"
            )
            if r["link_gbps"] is None:
                notes.append("the KV moves at once (an unbounded link)")
            else:
                notes.append(f"the KV moves over {r['link']} ({r['link_gbps']:g} GB/s per GPU)")
            busy = f"{r['prefill_utilisation']:.0%} / {r['decode_utilisation']:.0%}"
            if r["refused"]:
                notes.append(
                    f"{r['refused']:,} requests need more KV than a decode replica holds: "
                    "never served, their TTFT not counted"
                )
        else:
            name = f"colocated {r['prefill_replicas']} × {r['prefill_deployment']}"
            busy = f"{r['prefill_utilisation']:.0%}"
        lines.append(
            f"{name:<38} {r['gpus']:>5} {_num(r['token_hit_rate'], 9)} "
            f"{_seconds(r['ttft_p50_s'], 9)} {_seconds(r['ttft_p95_s'], 8)} "
            f"{_seconds(r['ttft_p99_s'], 8)} {_ms(r['tpot_p50_s'], 9)} {_ms(r['tpot_p95_s'], 8)} "
            f"{_ms(r['transfer_p95_s'], 11)} {_seconds(r['decode_wait_p95_s'], 9)} {busy:>11}"
        )
    first = table.to_pylist()[0] if table.num_rows else None
    if first:
        notes.append(
            f"{first['model']}, {first['router']} router, {first['engine']} engine, load "
            f"{first['load_scale']:g}x, priced by {first['cost_source']}; busy: prefill / decode"
        )
    return "\n".join(lines + notes)


def _ms(x: float | None, width: int) -> str:
    return f"{'—':>{width}}" if x is None else f"{x * 1e3:>{width - 2}.1f}ms"
