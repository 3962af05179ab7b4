"""Coding-agent traces as published (``--format agent-json``): one JSON object per conversation,
the layout of kv-cache-tester's ``traces/`` (callanjfox/kv-cache-tester, Apache-2.0, at
94f6046; ``docs/trace_replay_tester.md``): ``id``, ``block_size``, ``hash_id_scope``
(``local``: ids unique within the conversation; ``global``: across conversations) and
``requests``, each with ``t`` (seconds from the conversation's start), ``type``, ``model``,
``in``, ``out``, ``hash_ids`` (one content id per *full* block), ``stop``, ``api_time`` and
``think_time``; an entry of ``type: subagent`` holds a sub-agent's own ``requests``, timed from
its start ``t``.

One input row is one request; a conversation that cannot be read or decoded is one row, and an
entry of it that breaks a rule is one row (its sub-agent's requests with it when the entry is a
sub-agent's), so the counts add up. Each conversation is a session (its ``id``); a sub-agent is
a child session (``<id>/<agent_id>``) whose ``parent_session_id`` is its parent's. Blocks are
keyed by model: a request's first block carries the salt ``xxh64(model ␟ id)`` (``local``) or
``xxh64(model)`` (``global``), so a request on another model never hits a block of the first,
and one on the same model may. A partial last block has no id and no hash; the engine always
computes the prompt's last token (the rule of token sources, ``last_token_rule``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prefixscope.ingest.formats.agent_inputs import open_conversations
from prefixscope.ingest.formats.agent_rows import Rows
from prefixscope.ingest.formats.arrival import Arrival
from prefixscope.ingest.formats.base import (
    IngestOptions,
    conform,
    mark_rejected,
    seconds_to_arrival,
)
from prefixscope.ingest.hashing import chain_id_groups, salt_of
from prefixscope.ingest.lines import FileReadState


@dataclass(frozen=True)
class AgentJson:
    name: str = "agent-json"
    default_block_size: int = 64

    def batches(self, path: Path, state: FileReadState) -> Iterator[pa.Table]:
        conversations = open_conversations(path)
        rank = {name: i for i, name in enumerate(conversations.names)}
        rows = Rows(state, len(conversations.names))
        for member in conversations.read(state):
            rows.conversation(member, rank.get(member.name, 0))
            if rows.full():
                yield rows.flush()
        if conversations.truncated is not None and not conversations.cut:
            state.lines += 1  # the unreadable rest: one line, marked by the loader
            state.truncated = (state.lines, conversations.truncated)
        if rows.pending():
            yield rows.flush()

    def parse(
        self, con: duckdb.DuckDBPyConnection, batch: pa.Table, options: IngestOptions
    ) -> pa.Table:
        del con  # everything was decoded while reading; the rules here are array work
        rows = batch
        trace_bs = np.asarray(rows["trace_block_size"].fill_null(0), dtype=np.int64)
        ok = np.asarray(pc.is_null(rows["reason"]).to_numpy(zero_copy_only=False), dtype=bool)
        bs = options.block_size or self.default_block_size
        other = ok & ((trace_bs <= 0) | (bs % np.maximum(trace_bs, 1) != 0))
        if other.any():
            rows = mark_rejected(
                rows, other, "block_size_mismatch",
                f"the conversation's blocks do not divide the ingest's {bs}-token blocks "
                "(the first conversation's size, or --block-size: a multiple of the trace's)",
            )  # fmt: skip
        ids = rows["ids"].combine_chunks()
        counts = np.asarray(pc.list_value_length(ids).fill_null(0), dtype=np.int64)
        tokens = np.asarray(rows["input_tokens"].fill_null(0), dtype=np.int64)
        safe_bs = np.maximum(trace_bs, 1)
        full = tokens // safe_bs
        ok = np.asarray(pc.is_null(rows["reason"]).to_numpy(zero_copy_only=False), dtype=bool)
        wrong = ok & (counts != full) & (counts != -(-tokens // safe_bs))
        if wrong.any():
            rows = mark_rejected(
                rows, wrong, "block_count_mismatch",
                "len(hash_ids) is neither in // block_size (the full blocks) nor one more",
            )  # fmt: skip
            ok &= ~wrong
        hashes = _hashes(rows, ids, ok, np.minimum(counts, full), bs, safe_bs)
        first, total = options.arrival_base
        own = int(rows["conversations"][0].as_py()) if rows.num_rows else 0
        starts = Arrival.parse(options.arrival, options.arrival_seed).starts(total or own)
        rank = first + np.asarray(rows["rank"].fill_null(0), dtype=np.int64)
        at = starts[rank] if len(starts) else np.zeros(rows.num_rows)
        rows = rows.append_column("at_s", pa.array(at + np.asarray(rows["t_s"].fill_null(0.0))))
        rows, arrival = seconds_to_arrival(rows, "at_s", options)
        rows = _placed(rows, batch)
        n = rows.num_rows
        return conform(
            pa.table(
                {
                    "line": rows["line"],
                    "reason": rows["reason"],
                    "detail": rows["detail"],
                    "arrival_ts": arrival,
                    "tenant": pa.array([options.tenant] * n, pa.string()),
                    "session_id": rows["session_id"],
                    "parent_session_id": rows["parent_session_id"],
                    "log_request_id": rows["log_request_id"],
                    "input_tokens": rows["input_tokens"],
                    "output_tokens": rows["output_tokens"],
                    "block_size": pa.array(np.full(n, bs, np.int32)),
                    "block_hashes": hashes,
                    "model": rows["model"],
                    "stop_reason": rows["stop_reason"],
                    "api_time_s": rows["api_time_s"],
                    "think_time_s": rows["think_time_s"],
                    "last_token_rule": pa.array(np.ones(n, bool)),
                }
            )
        )


def _hashes(
    rows: pa.Table,
    ids: pa.ListArray,
    ok: np.ndarray,
    keep: np.ndarray,
    bs: int,
    trace_bs: np.ndarray,
) -> pa.ListArray:
    """Each accepted row's first ``keep`` ids chained into ``bs``-token blocks under its salt
    (model, and the conversation when its ids are local); rejected rows get none."""
    keep = np.where(ok, keep, 0)
    offsets = np.asarray(ids.offsets, dtype=np.int64)
    values = np.asarray(ids.flatten(), dtype=np.uint64)
    lengths = np.diff(offsets)
    position = np.arange(len(values)) - np.repeat(offsets[:-1] - offsets[0], lengths)
    kept = values[position < np.repeat(keep, lengths)]
    salts = _salts(rows)
    group = np.where(ok, bs // trace_bs, 1)
    sizes = np.unique(group[ok]) if ok.any() else np.array([1])
    results = []
    for g in sizes:  # one size in any real input; rows of another size keep no id in this pass
        mine = np.where(group == g, keep, 0)
        picked = kept[np.repeat(group == g, keep)]
        h_offsets, h = chain_id_groups(
            np.concatenate(([0], np.cumsum(mine))), picked, int(g), salts
        )
        results.append((group == g, h_offsets, h))
    if len(results) == 1:
        _, h_offsets, h = results[0]
        return pa.ListArray.from_arrays(
            pa.array(h_offsets.astype(np.int32)), pa.array(h, pa.uint64())
        )
    counts = np.zeros(rows.num_rows, np.int64)
    for mask, h_offsets, _ in results:
        counts[mask] = np.diff(h_offsets)[mask]
    pieces = []
    for r in range(rows.num_rows):  # several sizes: rows merged one by one (rare)
        for mask, h_offsets, h in results:
            if mask[r]:
                pieces.append(h[h_offsets[r] : h_offsets[r + 1]])
    flat = np.concatenate(pieces) if pieces else np.zeros(0, np.uint64)
    out = np.concatenate(([0], np.cumsum(counts))).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(out), pa.array(flat, pa.uint64()))


def _placed(rows: pa.Table, batch: pa.Table) -> pa.Table:
    """``rows`` with the message of each reject judged here (not while reading) prefixed by
    where its request is: the conversation's file and the entry."""
    new = pc.and_(pc.is_null(batch["reason"]), pc.is_valid(rows["reason"]))
    if not pc.any(new).as_py():
        return rows
    prefixed = pc.binary_join_element_wise(rows["place"], rows["detail"], ": ")
    detail = pc.if_else(new, prefixed, rows["detail"])
    return rows.set_column(rows.schema.get_field_index("detail"), "detail", detail)


def _salts(rows: pa.Table) -> np.ndarray:
    """Per row, the salt of its model (and conversation, for local ids): one hash per pair."""
    keys = rows["salt_key"].to_pylist()
    memo: dict[str, np.uint64] = {}
    return np.array(
        [memo.setdefault(k, salt_of(k)) if k is not None else 0 for k in keys], np.uint64
    )
