"""The structure section of the report, and its terminal summary: conversations, where hits
come from, the most shared prefixes, what breaks reuse and how soon blocks are reused.

The page reads only the ``latest_*`` structure views (the tables of ``latest_structure_run``);
``templates/structure.html`` lays them out."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa

from prefixscope.analysis.structure import firstnew
from prefixscope.analysis.trace.measure import FLEET
from prefixscope.dashboards.agents import distribution_rows, gap_table
from prefixscope.dashboards.agents import summary_lines as agent_lines
from prefixscope.dashboards.views import has_view, read_view
from prefixscope.terminal import More, clip

TOP_SHOWN = 10


def structure_section(con: duckdb.DuckDBPyConnection, block_size: int) -> dict[str, Any] | None:
    """What ``templates/structure.html`` shows of the latest structure run; None before any."""
    if read_view(con, "latest_structure_run").is_empty():
        return None
    prefixes = read_view(con, "latest_shared_prefixes")
    cap = None if prefixes.is_empty() else prefixes["capacity_blocks"][0]
    return {
        "sessions": session_rows(_tenants_only(read_view(con, "latest_session_stats"))),
        "hit_sources": hit_source_lines(read_view(con, "latest_hit_sources")),
        "prefixes": prefix_rows(prefixes),
        "prefixes_capacity": None if cap is None else f"{cap:,}",
        "first_new": first_new_lines(read_view(con, "latest_first_new_blocks"), block_size),
        "reuse": reuse_rows(_tenants_only(read_view(con, "latest_reuse_shares"))),
        # views a warehouse from before them (opened read-only, never brought up to date) lacks
        "agents": distribution_rows(read_view(con, "latest_agent_sessions"))
        if has_view(con, "latest_agent_sessions")
        else [],
        "gaps": gap_table(read_view(con, "latest_misses_by_gap"))
        if has_view(con, "latest_misses_by_gap")
        else ([], []),
    }


def hit_source_lines(sources: pl.DataFrame) -> list[str]:
    """One sentence per tenant and configuration."""
    out = []
    for r in _tenants_only(sources).iter_rows(named=True):
        who = "Fleet" if r["tenant"] == FLEET else f"Tenant {r['tenant']}"
        config = (
            "infinite cache"
            if r["capacity_blocks"] is None
            else f"{r['policy']} at {r['capacity_blocks']:,} blocks"
        )
        inp = r["input_tokens"] or 1
        out.append(
            f"{who}, {config}: {r['hit_tokens'] / inp:.1%} of input tokens hit = "
            f"{r['own_session_tokens'] / inp:.1%} own session history + "
            f"{r['shared_prefix_tokens'] / inp:.1%} prefixes shared with its other sessions + "
            f"{r['other_tenant_tokens'] / inp:.1%} blocks of other tenants."
        )
    return out


def first_new_lines(hist: pl.DataFrame, block_size: int) -> list[str]:
    out = []
    for tenant in _tenants_only(hist)["tenant"].unique(maintain_order=True).to_list():
        rows = hist.filter(pl.col("tenant") == tenant).to_dicts()
        who = "Fleet" if tenant == FLEET else f"Tenant {tenant}"
        out.append(f"{who}: {firstnew.finding(rows, block_size)}")
    return out


def format_structure(tables: dict[str, pa.Table], more: Callable[[str], More] | None = None) -> str:
    """A terminal summary of one run's tables; with ``more`` (what shows a table's rows, by
    its name), at most ``terminal.MAX_ROWS`` lines of each."""
    stats = pl.DataFrame(tables["session_stats"])
    lines: list[str] = []
    for r in _tenants_only(stats).iter_rows(named=True):
        who = "fleet" if r["tenant"] == FLEET else r["tenant"]
        check = ""
        if r["inference_precision"] is not None:
            check = (
                f"; inferred links vs the log: precision {r['inference_precision']:.3f}, "
                f"recall {r['inference_recall'] or 0:.3f}"
            )
        lines.append(
            f"{who}: {r['requests']:,} requests in {r['sessions']:,} sessions "
            f"({r['multi_turn_sessions']:,} with several turns, up to {r['max_turns']}); "
            f"own history {r['history_share'] or 0:.1%} of input tokens{check}"
        )
    lines = clip(lines, more and more("session_stats"), "tenants")
    lines += clip(
        hit_source_lines(pl.DataFrame(tables["hit_sources"])), more and more("hit_sources")
    )
    agents = pl.DataFrame(tables["agent_sessions"]) if "agent_sessions" in tables else None
    if agents is not None and not agents.is_empty():
        lines += clip(agent_lines(agents), more and more("agent_sessions"), "tenants")
    top = pl.DataFrame(tables["shared_prefixes"]).head(3)
    for r in top.iter_rows(named=True):
        saved = "" if r["tokens_saved"] is None else f", pinning saves {r['tokens_saved']:,} tokens"
        lines.append(
            f"shared prefix #{r['rank']}: {r['tokens']:,} tokens, {r['sessions']:,} sessions, "
            f"{r['requests']:,} requests{saved}"
        )
    return "\n".join(lines)


def _tenants_only(df: pl.DataFrame) -> pl.DataFrame:
    """With one tenant, its rows repeat the fleet's: keep the fleet's."""
    if df.filter(pl.col("tenant") != FLEET)["tenant"].n_unique() <= 1:
        return df.filter(pl.col("tenant") == FLEET)
    return df


def session_rows(stats: pl.DataFrame) -> list[dict[str, str]]:
    out = []
    for r in stats.iter_rows(named=True):
        check = "—"
        if r["inference_precision"] is not None:
            check = f"{r['inference_precision']:.3f} / {r['inference_recall'] or 0:.3f}"
        out.append(
            {
                "tenant": _who(r["tenant"]),
                "requests": f"{r['requests']:,}",
                "sessions": f"{r['sessions']:,}",
                "multi_turn_sessions": f"{r['multi_turn_sessions']:,}",
                "turns": f"{r['mean_turns']:.2f} / {r['max_turns']}",
                "gap": _seconds(r["median_gap_s"]),
                "growth": "—"
                if r["median_growth_tokens"] is None
                else f"{r['median_growth_tokens']:,.0f}",
                "history_share": _pct(r["history_share"]),
                "check": check,
            }
        )
    return out


def prefix_rows(prefixes: pl.DataFrame) -> list[dict[str, str]]:
    """The first :data:`TOP_SHOWN` shared prefixes."""
    return [
        {
            "rank": str(r["rank"]),
            "tokens": f"{r['tokens']:,}",
            "sessions": f"{r['sessions']:,}",
            "requests": f"{r['requests']:,}",
            "tenants": str(r["tenants"]),
            "first_seen": f"{r['first_seen']:%Y-%m-%d %H:%M:%S}",
            "last_seen": f"{r['last_seen']:%Y-%m-%d %H:%M:%S}",
            "gap": _seconds(r["median_gap_s"]),
            "saved": "—" if r["tokens_saved"] is None else f"{r['tokens_saved']:,}",
        }
        for r in prefixes.head(TOP_SHOWN).iter_rows(named=True)
    ]


def reuse_rows(shares: pl.DataFrame) -> list[dict[str, str]]:
    return [
        {
            "tenant": _who(r["tenant"]),
            "request_kind": "all" if r["request_kind"] == "*" else r["request_kind"],
            "reuses": f"{r['reuses']:,}",
            "within_10s": _pct(r["within_10s"]),
            "within_1m": _pct(r["within_1m"]),
            "within_10m": _pct(r["within_10m"]),
            "within_1h": _pct(r["within_1h"]),
        }
        for r in shares.iter_rows(named=True)
    ]


def _who(tenant: str) -> str:
    return "fleet" if tenant == FLEET else tenant


def _seconds(x: float | None) -> str:
    return "—" if x is None else f"{x:,.1f} s"


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:.1%}"
