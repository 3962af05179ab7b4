"""Agent sessions on the page and the terminal: per tenant, the distribution across its sessions
of each column of ``agent_sessions`` (p10, median, p90, max), and a line of what the sessions
are. Reads the table's rows only (``latest_agent_sessions`` on the page)."""

from __future__ import annotations

import polars as pl

#: The columns whose distribution across sessions is shown, with their labels and units.
MEASURES = (
    ("requests", "requests", ""),
    ("lifetime_s", "lifetime", "s"),
    ("busy_s", "busy time (sum of api_time)", "s"),
    ("duty_cycle", "duty cycle (busy / lifetime)", "share"),
    ("median_gap_s", "median gap between requests", "s"),
    ("p90_gap_s", "p90 gap between requests", "s"),
    ("tool_loops", "tool-call loops", ""),
    ("longest_tool_loop", "longest tool-call loop (requests)", ""),
    ("subagents", "sub-agents", ""),
)
QUANTILES = ((0.1, "p10"), (0.5, "p50"), (0.9, "p90"))


def distribution_rows(sessions: pl.DataFrame) -> list[dict[str, str]]:
    """One row per tenant and measure: its p10, median, p90 and max across the sessions."""
    out = []
    for tenant in sessions["tenant"].unique(maintain_order=True).to_list():
        mine = sessions.filter(pl.col("tenant") == tenant)
        for column, label, unit in MEASURES:
            values = mine[column].drop_nulls()
            if values.is_empty():
                continue
            row = {"tenant": tenant, "measure": label}
            for q, name in QUANTILES:
                row[name] = _shown(values.quantile(q, "linear"), unit)
            row["max"] = _shown(values.max(), unit)
            out.append(row)
    return out


def summary_lines(sessions: pl.DataFrame) -> list[str]:
    """Per tenant: its sessions and sub-agents, the share of requests in tool-call loops, and
    the median lifetime, duty cycle and gap."""
    lines = []
    for tenant in sessions["tenant"].unique(maintain_order=True).to_list():
        mine = sessions.filter(pl.col("tenant") == tenant)
        subs = mine.filter(pl.col("parent_session").is_not_null()).height
        requests = int(mine["requests"].sum())
        in_loops = int(mine["tool_loop_requests"].sum())
        duty = mine["duty_cycle"].drop_nulls()
        lines.append(
            f"{tenant}: {mine.height - subs:,} agent sessions and {subs:,} sub-agents, "
            f"{requests:,} requests, {in_loops / max(requests, 1):.1%} of them in tool-call "
            f"loops; per session, median lifetime {_shown(mine['lifetime_s'].median(), 's')}, "
            f"duty cycle {_shown(duty.median() if not duty.is_empty() else None, 'share')}, "
            f"gap {_shown(mine['median_gap_s'].median(), 's')}"
        )
    return lines


def _shown(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "share":
        return f"{value:.1%}"
    if unit == "s":
        if value >= 3600:
            return f"{value / 3600:,.1f} h"
        if value >= 60:
            return f"{value / 60:,.1f} min"
        return f"{value:,.1f} s"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"


def gap_lines(misses: pl.DataFrame) -> list[str]:
    """Per configuration, the fleet's missed tokens by the gap before the request in its
    session: each bucket's share, sub-agents' requests in brackets where there are any."""
    fleet = misses.filter(pl.col("tenant") == "*")
    order = ["policy", "isolation", "capacity_blocks"]
    lines = []
    for key, rows in fleet.group_by(order, maintain_order=True):
        policy, isolation, capacity = key
        cap = "unbounded" if capacity is None else f"{capacity:,} blocks"
        shares = rows.group_by("gap_bucket", maintain_order=True).agg(
            share=pl.col("share").sum(),
            sub=pl.col("share").filter(pl.col("subagent")).sum(),
        )
        parts = [
            f"{r['gap_bucket']} {r['share']:.1%}"
            + (f" (sub-agents {r['sub']:.1%})" if r["sub"] else "")
            for r in shares.iter_rows(named=True)
            if r["share"] is not None
        ]
        lines.append(f"missed tokens by gap, {policy} {isolation} {cap}: " + ", ".join(parts))
    return lines


def gap_table(misses: pl.DataFrame) -> tuple[list[tuple[str, str, bool]], list[dict[str, str]]]:
    """The page's table of missed tokens by gap: a row per tenant and configuration, a column
    per gap bucket (its share of the missed tokens, sub-agents' part in brackets). Only the
    rows that say something: a tenant none of whose requests names a session is all in ``no
    session``, and the fleet is shown only when every request names one."""
    if misses.is_empty():
        return [], []
    alone = misses.group_by("tenant").agg(
        named=(pl.col("gap_bucket") != "no session").any(),
        unnamed=(pl.col("gap_bucket") == "no session").any(),
    )
    keep = alone.filter(
        pl.when(pl.col("tenant") == "*").then(~pl.col("unnamed")).otherwise(pl.col("named"))
    )["tenant"]
    misses = misses.filter(pl.col("tenant").is_in(keep.implode()))
    if misses.is_empty():
        return [], []
    buckets = misses["gap_bucket"].unique(maintain_order=True).to_list()
    columns = [("tenant", "tenant", True), ("configuration", "configuration", True)]
    columns += [(f"b{i}", name, False) for i, name in enumerate(buckets)]
    columns.append(("missed", "missed tokens", False))
    rows = []
    order = ["tenant", "policy", "isolation", "capacity_blocks"]
    for key, part in misses.group_by(order, maintain_order=True):
        tenant, policy, isolation, capacity = key
        cap = "unbounded" if capacity is None else f"{capacity:,} blocks"
        row = {"tenant": "fleet" if tenant == "*" else str(tenant)}
        row["configuration"] = f"{policy}, {isolation}, {cap}"
        shares = part.group_by("gap_bucket").agg(
            share=pl.col("share").sum(), sub=pl.col("share").filter(pl.col("subagent")).sum()
        )
        by = {r["gap_bucket"]: r for r in shares.iter_rows(named=True)}
        for i, name in enumerate(buckets):
            r = by.get(name)
            if r is None or r["share"] is None:
                row[f"b{i}"] = "—"
            else:
                sub = f" ({r['sub']:.1%} sub-agents)" if r["sub"] else ""
                row[f"b{i}"] = f"{r['share']:.1%}{sub}"
        row["missed"] = f"{int(part['missed_tokens'].sum()):,}"
        rows.append(row)
    return columns, rows
