"""What the fleet reads from the warehouse beyond the trace: each request's output tokens and
session, in the trace's replay order."""

from __future__ import annotations

import duckdb
import numpy as np

from prefixscope.analysis.fleet.run import Traffic
from prefixscope.analysis.trace.load import REPLAY_ORDER


def load_traffic(con: duckdb.DuckDBPyConnection) -> Traffic:
    """Output tokens (0 where the log has none) and session ids, in replay order: what the
    fleet needs beyond the trace."""
    table = con.sql(
        f"SELECT coalesce(output_tokens, 0) AS output_tokens, session_id FROM requests "
        f"ORDER BY {REPLAY_ORDER}"
    ).to_arrow_table()
    sessions = table.column("session_id")
    return Traffic(
        np.maximum(table.column("output_tokens").to_numpy(), 0).astype(np.int64),
        None if sessions.null_count == len(sessions) else sessions.to_pylist(),
    )
