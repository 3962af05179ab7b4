"""The structure section of the report, and its terminal summary: conversations, where hits
come from, the most shared prefixes, what breaks reuse and how soon blocks are reused.

Reads only the structure tables of one run (``marts/latest_structure_run``)."""

from __future__ import annotations

import html

import duckdb
import polars as pl
import pyarrow as pa

from prefixscope import sql
from prefixscope.analysis import firstnew
from prefixscope.warehouse import FLEET

NO_RUN = "<p>No structure yet: run <code>prefixscope structure</code>.</p>"
TOP_SHOWN = 10


def load_latest(con: duckdb.DuckDBPyConnection) -> dict[str, pl.DataFrame] | None:
    """The structure tables of the newest valid run, or None."""
    rows = con.execute(sql.load("marts/latest_structure_run")).fetchall()
    if not rows:
        return None
    run_id = rows[0][0]
    names = ("session_stats", "shared_prefixes", "hit_sources", "first_new_blocks")
    frames = {
        n: con.sql(f"SELECT * EXCLUDE (run_id) FROM {n} WHERE run_id = ?", params=[run_id]).pl()
        for n in names
    }
    frames["reuse_shares"] = con.sql(sql.load("marts/reuse_shares"), params=[run_id]).pl()
    frames["block_size"] = con.sql("SELECT max(block_size) AS b FROM requests").pl()
    return frames


def structure_html(con: duckdb.DuckDBPyConnection) -> str:
    frames = load_latest(con)
    if frames is None:
        return NO_RUN
    block_size = int(frames["block_size"]["b"][0] or 1)
    return "\n".join(
        [
            "<h3>Conversations</h3>",
            _sessions_html(_tenants_only(frames["session_stats"])),
            "<h3>Where hits come from</h3>",
            "<ul id='hit-sources'>"
            + "".join(f"<li>{html.escape(s)}</li>" for s in hit_source_lines(frames["hit_sources"]))
            + "</ul>",
            "<h3>Most shared prefixes</h3>",
            _prefixes_html(frames["shared_prefixes"]),
            "<h3>What breaks reuse</h3>",
            "<ul id='first-new'>"
            + "".join(
                f"<li>{html.escape(s)}</li>"
                for s in first_new_lines(frames["first_new_blocks"], block_size)
            )
            + "</ul>",
            "<h3>How soon blocks are reused</h3>",
            _reuse_html(frames["reuse_shares"]),
        ]
    )


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


def format_structure(tables: dict[str, pa.Table]) -> str:
    """A terminal summary of one run's tables."""
    stats = pl.DataFrame(tables["session_stats"])
    lines = []
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
    lines += hit_source_lines(pl.DataFrame(tables["hit_sources"]))
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


def _sessions_html(stats: pl.DataFrame) -> str:
    head = (
        "<tr><th class='text'>tenant</th><th>requests</th><th>sessions</th>"
        "<th>with several turns</th><th>turns per session (mean / max)</th>"
        "<th>time between turns (median)</th><th>prompt growth per turn (median)</th>"
        "<th>own history share of input</th>"
        "<th>inferred links vs log (precision / recall)</th></tr>"
    )
    body = []
    for r in stats.iter_rows(named=True):
        check = "—"
        if r["inference_precision"] is not None:
            check = f"{r['inference_precision']:.3f} / {r['inference_recall'] or 0:.3f}"
        gap = "—" if r["median_gap_s"] is None else f"{r['median_gap_s']:,.1f} s"
        growth = "—" if r["median_growth_tokens"] is None else f"{r['median_growth_tokens']:,.0f}"
        body.append(
            f"<tr><td class='text'>{_who(r['tenant'])}</td><td>{r['requests']:,}</td>"
            f"<td>{r['sessions']:,}</td><td>{r['multi_turn_sessions']:,}</td>"
            f"<td>{r['mean_turns']:.2f} / {r['max_turns']}</td><td>{gap}</td>"
            f"<td>{growth}</td><td>{_pct(r['history_share'])}</td><td>{check}</td></tr>"
        )
    return f"<table id='sessions'>{head}{''.join(body)}</table>"


def _prefixes_html(prefixes: pl.DataFrame) -> str:
    if prefixes.is_empty():
        return "<p>No prefix is shared by two sessions.</p>"
    head = (
        "<tr><th>rank</th><th>tokens</th><th>sessions</th><th>requests</th><th>tenants</th>"
        "<th class='text'>first seen</th><th class='text'>last seen</th>"
        "<th>median time between uses</th><th>tokens saved pinned vs LRU</th></tr>"
    )
    body = []
    for r in prefixes.head(TOP_SHOWN).iter_rows(named=True):
        saved = "—" if r["tokens_saved"] is None else f"{r['tokens_saved']:,}"
        gap = "—" if r["median_gap_s"] is None else f"{r['median_gap_s']:,.1f} s"
        body.append(
            f"<tr><td>{r['rank']}</td><td>{r['tokens']:,}</td><td>{r['sessions']:,}</td>"
            f"<td>{r['requests']:,}</td><td>{r['tenants']}</td>"
            f"<td class='text'>{r['first_seen']:%Y-%m-%d %H:%M:%S}</td>"
            f"<td class='text'>{r['last_seen']:%Y-%m-%d %H:%M:%S}</td><td>{gap}</td>"
            f"<td>{saved}</td></tr>"
        )
    cap = prefixes["capacity_blocks"][0]
    note = "" if cap is None else f"<p>Tokens saved: pinned minus plain LRU at {cap:,} blocks.</p>"
    return f"<table id='shared-prefixes'>{head}{''.join(body)}</table>{note}"


def _reuse_html(shares: pl.DataFrame) -> str:
    shares = _tenants_only(shares)
    if shares.is_empty():
        return "<p>No block is used twice.</p>"
    head = (
        "<tr><th class='text'>tenant</th><th class='text'>request kind</th><th>reuses</th>"
        "<th>within 10 s</th><th>within 1 min</th><th>within 10 min</th><th>within 1 h</th></tr>"
    )
    body = [
        f"<tr><td class='text'>{_who(r['tenant'])}</td>"
        f"<td class='text'>{'all' if r['request_kind'] == '*' else html.escape(r['request_kind'])}"
        f"</td><td>{r['reuses']:,}</td><td>{_pct(r['within_10s'])}</td>"
        f"<td>{_pct(r['within_1m'])}</td><td>{_pct(r['within_10m'])}</td>"
        f"<td>{_pct(r['within_1h'])}</td></tr>"
        for r in shares.iter_rows(named=True)
    ]
    return f"<table id='reuse-times'>{head}{''.join(body)}</table>"


def _who(tenant: str) -> str:
    return "fleet" if tenant == FLEET else html.escape(tenant)


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:.1%}"
