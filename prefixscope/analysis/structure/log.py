"""The log's own conversation columns (session, chat and parent ids, turn, request type),
per request in replay order, beside a trace of the same requests."""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import numpy as np

from prefixscope.analysis.structure import turns
from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.load import REPLAY_ORDER


@dataclass(frozen=True)
class RequestLog:
    """The log's own conversation columns, per request in replay order."""

    ids: turns.LogIds
    session_names: tuple[str, ...]  # index = LogIds.session code
    request_type: np.ndarray  # object: str or None


def load_log(con: duckdb.DuckDBPyConnection, trace: Trace) -> RequestLog:
    table = con.sql(
        "SELECT request_id, session_id, coalesce(chat_id, -2) AS chat_id, "
        "coalesce(parent_chat_id, -2) AS parent_chat_id, coalesce(turn, 0) AS turn, "
        f"request_type FROM requests ORDER BY {REPLAY_ORDER}"
    ).to_arrow_table()
    if trace.request_ids is not None and not table["request_id"].combine_chunks().equals(
        trace.request_ids
    ):
        raise ValueError("the requests table changed while it was read: run again")
    session = table["session_id"].to_numpy(zero_copy_only=False)
    has = np.array([s is not None for s in session], bool)
    names, codes = np.unique(session[has].astype(str), return_inverse=True)
    code = np.full(len(session), -1, np.int64)
    code[has] = codes.ravel()
    ids = turns.LogIds(
        chat_id=table["chat_id"].to_numpy().astype(np.int64),
        parent_chat_id=table["parent_chat_id"].to_numpy().astype(np.int64),
        turn=table["turn"].to_numpy().astype(np.int32),
        session=code,
    )
    kinds = table["request_type"].to_numpy(zero_copy_only=False)
    return RequestLog(ids, tuple(str(n) for n in names), kinds)
