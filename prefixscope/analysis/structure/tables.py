"""The structure tables: conversation turns, shared prefixes, where hits come from, what
breaks reuse and how long blocks wait to be reused. ``analyse`` is pure (trace and log columns
in, Arrow tables out). Semantics: docs/structure.md."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prefixscope.analysis.policies import POLICIES, Outcome, PolicyOptions
from prefixscope.analysis.structure import attribution, firstnew, pins, prefixes, reuse, turns
from prefixscope.analysis.structure.log import RequestLog
from prefixscope.analysis.trace import measure
from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.measure import hit_tokens, trace_groups

ALL_KINDS = "*"
TABLES = (
    "turns",
    "session_stats",
    "shared_prefixes",
    "hit_sources",
    "first_new_blocks",
    "reuse_times",
)


@dataclass(frozen=True)
class StructureSettings:
    """``capacity_blocks``: the simulated configuration (LRU, and pinned per prefix);
    ``top``: shared-prefix rows kept; ``simulate_top``: of those, how many are simulated
    pinned; ``max_forks``: rule 4 of turn inference."""

    capacity_blocks: int | None = 16_000
    top: int = 20
    simulate_top: int = 10
    max_forks: int = turns.MAX_FORKS


def analyse(trace: Trace, log: RequestLog, settings: StructureSettings) -> dict[str, pa.Table]:
    """Every structure table of ``trace`` (without run ids)."""
    t = turns.build_turns(trace, log.ids, settings.max_forks)
    kind = request_kinds(log, t)
    outcomes = {("ceiling", None): POLICIES["ceiling"].replay(trace, None, PolicyOptions())}
    if settings.capacity_blocks:
        lru = POLICIES["lru"].replay(trace, settings.capacity_blocks, PolicyOptions())
        outcomes[("lru", settings.capacity_blocks)] = lru
    return {
        "turns": turns_table(trace, log, t, kind),
        "session_stats": session_stats(trace, log, t, settings.max_forks),
        "shared_prefixes": shared_prefixes(trace, t, settings, outcomes),
        "hit_sources": hit_sources(trace, t, outcomes),
        "first_new_blocks": first_new_blocks(trace, outcomes[("ceiling", None)]),
        "reuse_times": reuse_times(trace, kind),
    }


def request_kinds(log: RequestLog, t: turns.Turns) -> np.ndarray:
    """The log's request type where it has one, else ``first-turn`` / ``follow-up``."""
    fallback = np.where(t.turn <= 1, "first-turn", "follow-up").astype(object)
    have = np.array([k is not None for k in log.request_type], bool)
    return np.where(have, log.request_type, fallback)


def session_labels(trace: Trace, log: RequestLog, t: turns.Turns) -> list[str]:
    """A session's name: the log's session id, ``chat:<chat_id>`` of its first Bailian turn,
    else the request id of its first request."""
    ids = _request_ids(trace)
    root_label: dict[int, str] = {}
    out = []
    for root in t.session.tolist():
        label = root_label.get(root)
        if label is None:
            if log.ids.session[root] >= 0:
                label = log.session_names[log.ids.session[root]]
            elif log.ids.has_chat[root]:
                label = f"chat:{log.ids.chat_id[root]}"
            else:
                label = ids[root]
            root_label[root] = label
        out.append(label)
    return out


def turns_table(trace: Trace, log: RequestLog, t: turns.Turns, kind: np.ndarray) -> pa.Table:
    ids = pa.array(_request_ids(trace), pa.string())
    has_parent = t.parent >= 0
    parent = np.where(has_parent, t.parent, 0)
    return pa.table(
        {
            "request_id": ids,
            "tenant": pa.array(_tenant_names(trace), pa.string()),
            "session": pa.array(session_labels(trace, log, t), pa.string()),
            "session_inferred": pa.array(t.session_inferred),
            "parent_request_id": pc.if_else(
                pa.array(has_parent), ids.take(pa.array(parent)), pa.scalar(None, pa.string())
            ),
            "parent_inferred": pa.array(t.parent_inferred),
            "turn": pa.array(t.turn, pa.int32()),
            "turn_inferred": pa.array(t.turn_inferred),
            "request_kind": pa.array(kind.astype(str), pa.string()),
            "arrival_ts": _timestamps(trace, trace.times),
            "input_tokens": pa.array(trace.input_tokens, pa.int64()),
            "history_tokens": pa.array(hit_tokens(trace, t.history_blocks), pa.int64()),
            "gap_s": pa.array(trace.times - trace.times[parent], mask=~has_parent),
        }
    )


def session_stats(trace: Trace, log: RequestLog, t: turns.Turns, max_forks: int) -> pa.Table:
    logged = turns.logged_parents(log.ids)
    by_log = log.ids.has_chat | log.ids.has_session
    guessed, _ = turns.infer_parents(trace, max_forks)
    history = hit_tokens(trace, t.history_blocks)
    rows = []
    for name, mask in trace_groups(trace):
        follow = mask & (t.parent >= 0)
        p = t.parent[follow]
        sizes = np.bincount(t.session[mask])
        sizes = sizes[sizes > 0]
        gap = trace.times[follow] - trace.times[p]
        growth = (trace.input_tokens[follow] - trace.input_tokens[p]).astype(float)
        inp, hist = int(trace.input_tokens[mask].sum()), int(history[mask].sum())
        checked = mask & by_log
        true_n, guess_n, both = turns.link_accuracy(logged[checked], guessed[checked])
        known = bool(checked.any())
        rows.append(
            {
                "tenant": name,
                "requests": int(mask.sum()),
                "sessions": len(sizes),
                "multi_turn_sessions": int((sizes > 1).sum()),
                "mean_turns": float(sizes.mean()),
                "median_turns": float(np.median(sizes)),
                "p90_turns": float(np.quantile(sizes, 0.9)),
                "max_turns": int(sizes.max()),
                "follow_ups": int(follow.sum()),
                "median_gap_s": _q(gap, 0.5),
                "p90_gap_s": _q(gap, 0.9),
                "median_growth_tokens": _q(growth, 0.5),
                "mean_growth_tokens": float(growth.mean()) if len(growth) else None,
                "input_tokens": inp,
                "history_tokens": hist,
                "history_share": hist / inp if inp else None,
                "logged_links": true_n if known else None,
                "inferred_links": guess_n if known else None,
                "matching_links": both if known else None,
                "inference_precision": both / guess_n if known and guess_n else None,
                "inference_recall": both / true_n if known and true_n else None,
            }
        )
    return pa.Table.from_pylist(rows, schema=SESSION_STATS_SCHEMA)


def shared_prefixes(
    trace: Trace,
    t: turns.Turns,
    settings: StructureSettings,
    outcomes: dict[tuple[str, int | None], Outcome],
) -> pa.Table:
    ranking = prefixes.rank(trace, t.session)
    ends = ranking.ends[: settings.top]
    cap = settings.capacity_blocks
    lru_tokens = None
    if cap:
        lru_tokens = int(hit_tokens(trace, outcomes[("lru", cap)].hit_blocks).sum())
    depth = prefixes.depth(trace)
    rows = []
    for i, (end, use) in enumerate(zip(ends, prefixes.uses(trace, ends), strict=True)):
        times = trace.times[use.requests]
        pinned_tokens = None
        if cap and i < settings.simulate_top:
            mask = pins.with_ancestors(trace, np.array([end]))
            if int(mask.sum()) <= cap:
                out = POLICIES["pinned"].hit_blocks(trace, cap, PolicyOptions(pinned=mask))
                pinned_tokens = int(hit_tokens(trace, out).sum())
        rows.append(
            {
                "rank": i + 1,
                "prefix_hash": int(trace.hashes[end]),
                "blocks": int(depth[end]) + 1,
                "tokens": use.tokens,
                "sessions": int(ranking.sessions[i]),
                "requests": int(ranking.requests[i]),
                "tenants": len(use.tenants),
                "tenant_names": list(use.tenants),
                "first_seen": _micros(trace, times.min()),
                "last_seen": _micros(trace, times.max()),
                "median_gap_s": _q(np.diff(times), 0.5),
                "capacity_blocks": cap,
                "lru_hit_tokens": lru_tokens if pinned_tokens is not None else None,
                "pinned_hit_tokens": pinned_tokens,
                "tokens_saved": None if pinned_tokens is None else pinned_tokens - lru_tokens,
            }
        )
    return pa.Table.from_pylist(rows, schema=SHARED_PREFIXES_SCHEMA)


def hit_sources(
    trace: Trace, t: turns.Turns, outcomes: dict[tuple[str, int | None], Outcome]
) -> pa.Table:
    rows = []
    for (policy, cap), outcome in outcomes.items():
        split = attribution.split_tokens(trace, t.session, outcome)
        tokens = hit_tokens(trace, outcome.hit_blocks)
        for name, mask in trace_groups(trace):
            parts = split[mask].sum(axis=0)
            rows.append(
                {
                    "tenant": name,
                    "policy": policy,
                    "capacity_blocks": cap,
                    "requests": int(mask.sum()),
                    "input_tokens": int(trace.input_tokens[mask].sum()),
                    "hit_tokens": int(tokens[mask].sum()),
                    **{
                        f"{c}_tokens": int(v)
                        for c, v in zip(attribution.CLASSES, parts, strict=True)
                    },
                }
            )
    return pa.Table.from_pylist(rows, schema=HIT_SOURCES_SCHEMA)


def first_new_blocks(trace: Trace, ceiling: Outcome) -> pa.Table:
    position = ceiling.hit_blocks.astype(np.int64)
    bs = trace.block_size
    rows = []
    for name, mask in trace_groups(trace):
        for b in firstnew.histogram(trace, position, mask):
            row = asdict(b)
            rows.append(
                {
                    "tenant": name,
                    **row,
                    "from_token": None if b.from_block is None else b.from_block * bs,
                    "to_token": None if b.to_block is None else b.to_block * bs,
                }
            )
    return pa.Table.from_pylist(rows, schema=FIRST_NEW_SCHEMA)


def reuse_times(trace: Trace, kind: np.ndarray) -> pa.Table:
    r = reuse.reuses(trace)
    which = reuse.bin_of(r.gap_s)
    n_bins = len(reuse.EDGES_S) + 1
    kinds = kind[r.request]
    tenant = trace.tenant_codes[r.request]
    rows = []
    groups = measure.groups(tenant, trace.tenants, keep_empty=True)
    for name, mask in groups:
        for k in [ALL_KINDS, *sorted(set(kinds[mask].tolist()))]:
            sel = mask if k == ALL_KINDS else mask & (kinds == k)
            if not sel.any():
                continue
            counts = np.bincount(which[sel], minlength=n_bins)
            tokens = np.bincount(which[sel], weights=r.tokens[sel], minlength=n_bins)
            for (low, high), c, tok in zip(reuse.bins(), counts, tokens, strict=True):
                rows.append(
                    {
                        "tenant": name,
                        "request_kind": k,
                        "low_s": low,
                        "high_s": high,
                        "reuses": int(c),
                        "reuse_tokens": int(tok),
                    }
                )
    return pa.Table.from_pylist(rows, schema=REUSE_SCHEMA)


SESSION_STATS_SCHEMA = pa.schema(
    [
        ("tenant", pa.string()),
        ("requests", pa.int64()),
        ("sessions", pa.int64()),
        ("multi_turn_sessions", pa.int64()),
        ("mean_turns", pa.float64()),
        ("median_turns", pa.float64()),
        ("p90_turns", pa.float64()),
        ("max_turns", pa.int64()),
        ("follow_ups", pa.int64()),
        ("median_gap_s", pa.float64()),
        ("p90_gap_s", pa.float64()),
        ("median_growth_tokens", pa.float64()),
        ("mean_growth_tokens", pa.float64()),
        ("input_tokens", pa.int64()),
        ("history_tokens", pa.int64()),
        ("history_share", pa.float64()),
        ("logged_links", pa.int64()),
        ("inferred_links", pa.int64()),
        ("matching_links", pa.int64()),
        ("inference_precision", pa.float64()),
        ("inference_recall", pa.float64()),
    ]
)
HIT_SOURCES_SCHEMA = pa.schema(
    [
        ("tenant", pa.string()),
        ("policy", pa.string()),
        ("capacity_blocks", pa.int64()),
        ("requests", pa.int64()),
        ("input_tokens", pa.int64()),
        ("hit_tokens", pa.int64()),
        ("own_session_tokens", pa.int64()),
        ("shared_prefix_tokens", pa.int64()),
        ("other_tenant_tokens", pa.int64()),
    ]
)
SHARED_PREFIXES_SCHEMA = pa.schema(
    [
        ("rank", pa.int32()),
        ("prefix_hash", pa.uint64()),
        ("blocks", pa.int32()),
        ("tokens", pa.int64()),
        ("sessions", pa.int64()),
        ("requests", pa.int64()),
        ("tenants", pa.int64()),
        ("tenant_names", pa.list_(pa.string())),
        ("first_seen", pa.timestamp("us", tz="UTC")),
        ("last_seen", pa.timestamp("us", tz="UTC")),
        ("median_gap_s", pa.float64()),
        ("capacity_blocks", pa.int64()),
        ("lru_hit_tokens", pa.int64()),
        ("pinned_hit_tokens", pa.int64()),
        ("tokens_saved", pa.int64()),
    ]
)
FIRST_NEW_SCHEMA = pa.schema(
    [
        ("tenant", pa.string()),
        ("from_block", pa.int32()),
        ("to_block", pa.int32()),
        ("from_token", pa.int64()),
        ("to_token", pa.int64()),
        ("requests", pa.int64()),
        ("input_tokens", pa.int64()),
        ("novel_tokens", pa.int64()),
    ]
)
REUSE_SCHEMA = pa.schema(
    [
        ("tenant", pa.string()),
        ("request_kind", pa.string()),
        ("low_s", pa.float64()),
        ("high_s", pa.float64()),
        ("reuses", pa.int64()),
        ("reuse_tokens", pa.int64()),
    ]
)


def _request_ids(trace: Trace) -> list[str]:
    if trace.request_ids is not None:
        return trace.request_ids.to_pylist()
    return [str(i) for i in range(trace.n_requests)]


def _tenant_names(trace: Trace) -> list[str]:
    return [trace.tenants[c] for c in trace.tenant_codes]


def _micros(trace: Trace, seconds: float) -> int:
    return int(round((trace.start_s + float(seconds)) * 1e6))


def _timestamps(trace: Trace, seconds: np.ndarray) -> pa.Array:
    micros = np.round((trace.start_s + seconds) * 1e6).astype(np.int64)
    return pa.array(micros, pa.timestamp("us", tz="UTC"))


def _q(values: np.ndarray, q: float) -> float | None:
    return float(np.quantile(values, q)) if len(values) else None
