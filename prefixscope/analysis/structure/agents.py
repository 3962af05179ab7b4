"""How agent sessions look (table ``agent_sessions``): per session of a log that names its
sessions, its requests, lifetime, busy time and duty cycle, the gaps between its requests, its
tool-call loops and its sub-agents. Semantics: docs/structure.md#agent-sessions.

A request's **gap** is the time from the previous request of its session to it (arrival to
arrival); its **idle** time is from the previous request's end (arrival + ``api_time``) to it.
A **tool-call loop** is a maximal run of at least two requests of a session in which each one
after the first follows a request that stopped on ``tool_use`` by at most ``loop_gap_s`` of
idle time: the agent calling tools and sending the results straight back.
"""

from __future__ import annotations

import duckdb
import polars as pl
import pyarrow as pa

from prefixscope.analysis.structure.schemas import AGENT_SESSIONS_SCHEMA
from prefixscope.analysis.trace.load import has_column

#: The table, written by the structure stage beside ``analyse``'s six.
TABLE = "agent_sessions"
#: The most idle seconds between a ``tool_use`` stop and the next request of a loop.
LOOP_GAP_S = 10.0
_TOOL_USE = "tool_use"


def load_agent_requests(con: duckdb.DuckDBPyConnection) -> pa.Table:
    """The columns the agent tables read, for every request that names its session (none
    from a requests table older than the agent columns)."""
    if not has_column(con, "parent_session_id"):
        return pa.table({c: pa.array([], t) for c, t in _EMPTY})
    return con.sql(
        "SELECT request_id, tenant, session_id, parent_session_id, model, stop_reason, "
        "api_time_s, epoch_us(arrival_ts) AS arrival_us FROM requests "
        "WHERE session_id IS NOT NULL"
    ).to_arrow_table()


_EMPTY = (
    ("request_id", pa.string()), ("tenant", pa.string()), ("session_id", pa.string()),
    ("parent_session_id", pa.string()), ("model", pa.string()), ("stop_reason", pa.string()),
    ("api_time_s", pa.float64()), ("arrival_us", pa.int64()),
)  # fmt: skip


def agent_sessions(requests: pa.Table, loop_gap_s: float = LOOP_GAP_S) -> pa.Table:
    """One row per (tenant, session) of ``requests`` (``load_agent_requests``' columns)."""
    if requests.num_rows == 0:
        return AGENT_SESSIONS_SCHEMA.empty_table()
    df = (
        pl.from_arrow(requests)
        .lazy()
        .with_columns(at_s=pl.col("arrival_us") / 1e6)
        .sort(["tenant", "session_id", "at_s", "request_id"])
    )
    session = ["tenant", "session_id"]
    prev_at = pl.col("at_s").shift(1).over(session)
    prev_end = (pl.col("at_s") + pl.col("api_time_s").fill_null(0.0)).shift(1).over(session)
    prev_stop = pl.col("stop_reason").shift(1).over(session)
    linked = (prev_stop == _TOOL_USE) & (pl.col("at_s") - prev_end <= loop_gap_s)
    df = df.with_columns(
        gap_s=pl.col("at_s") - prev_at,
        linked=linked.fill_null(False),
    ).with_columns(run=(~pl.col("linked")).cast(pl.Int64).cum_sum().over(session))
    loops = (
        df.group_by([*session, "run"])
        .agg(size=pl.len())
        .filter(pl.col("size") >= 2)
        .group_by(session)
        .agg(
            tool_loops=pl.len(),
            tool_loop_requests=pl.col("size").sum(),
            longest_tool_loop=pl.col("size").max(),
        )
    )
    per = df.group_by(session).agg(
        parent_session=pl.col("parent_session_id").drop_nulls().first(),
        models=pl.col("model").drop_nulls().unique().sort().str.join(","),
        requests=pl.len(),
        first_ts_us=pl.col("arrival_us").min(),
        start_s=pl.col("at_s").min(),
        end_s=(pl.col("at_s") + pl.col("api_time_s").fill_null(0.0)).max(),
        busy_s=pl.col("api_time_s").sum(),
        timed=pl.col("api_time_s").is_not_null().sum(),
        median_gap_s=pl.col("gap_s").median(),
        p90_gap_s=pl.col("gap_s").quantile(0.9, "linear"),
    )
    children = (
        per.filter(pl.col("parent_session").is_not_null())
        .group_by(["tenant", "parent_session"])
        .agg(
            subagents=pl.len(),
            subagent_models=pl.col("models")
            .str.split(",")
            .list.explode(keep_nulls=False, empty_as_null=False)
            .unique()
            .sort()
            .str.join(","),
        )
        .rename({"parent_session": "session_id"})
    )
    lifetime = pl.col("end_s") - pl.col("start_s")
    out = (
        per.join(loops, on=session, how="left")
        .join(children, on=session, how="left")
        .with_columns(
            lifetime_s=lifetime,
            busy_s=pl.when(pl.col("timed") > 0).then(pl.col("busy_s")),
            # busy over lifetime; above 1 only where the trace's own times overlap: capped
            duty_cycle=pl.when(
                (pl.col("timed") > 0) & (lifetime > 0) & (pl.col("busy_s") > 0)
            ).then(pl.min_horizontal(pl.col("busy_s") / lifetime, pl.lit(1.0))),
            tool_loops=pl.col("tool_loops").fill_null(0),
            tool_loop_requests=pl.col("tool_loop_requests").fill_null(0),
            longest_tool_loop=pl.col("longest_tool_loop").fill_null(0),
            subagents=pl.col("subagents").fill_null(0),
            first_ts=pl.from_epoch(pl.col("first_ts_us"), time_unit="us").dt.replace_time_zone(
                "UTC"
            ),
        )
        .rename({"session_id": "session"})
        .sort(["tenant", "first_ts", "session"])
        .collect()
    )
    return out.select(AGENT_SESSIONS_SCHEMA.names).to_arrow().cast(AGENT_SESSIONS_SCHEMA)
