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
