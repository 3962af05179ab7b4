"""The structure tables: conversation turns, shared prefixes, where hits come from, what
breaks reuse and how long blocks wait to be reused. ``analyse`` is pure (trace and log columns
in, Arrow tables out). Semantics: docs/structure.md."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prefixscope.analysis.policies import POLICIES, Outcome, PolicyOptions
from prefixscope.analysis.policies.lru import pinned_hit_blocks_many
from prefixscope.analysis.structure import (
    _kernels,
    attribution,
    firstnew,
    pins,
    prefixes,
    reuse,
    turns,
)
from prefixscope.analysis.structure.agents import LOOP_GAP_S
from prefixscope.analysis.structure.log import RequestLog
from prefixscope.analysis.structure.scan import scan
from prefixscope.analysis.structure.schemas import (
    FIRST_NEW_SCHEMA,
    HIT_SOURCES_SCHEMA,
    REUSE_SCHEMA,
    SESSION_STATS_SCHEMA,
    SHARED_PREFIXES_SCHEMA,
)
from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.measure import FLEET, hit_tokens

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
    pinned; ``max_forks``: rule 4 of turn inference; ``loop_gap_s``: the most idle seconds
    between a ``tool_use`` stop and the next request of a tool-call loop (``agents.py``)."""

    capacity_blocks: int | None = 16_000
    top: int = 20
    simulate_top: int = 10
    max_forks: int = turns.MAX_FORKS
    loop_gap_s: float = LOOP_GAP_S


def analyse(trace: Trace, log: RequestLog, settings: StructureSettings) -> dict[str, pa.Table]:
    """Every structure table of ``trace`` (without run ids)."""
    scanned = scan(trace)
    t = turns.build_turns(trace, log.ids, settings.max_forks, scanned)
    # The keys and forks served turn inference only: the pinned pass below wants the room
    # (empty arrays of their own: a slice would keep the whole buffer alive).
    scanned = replace(scanned, key=np.empty(0, np.int32), forks=np.empty(0, np.int32))
    kind = request_kinds(log, t)
    outcomes = {("ceiling", None): scanned.ceiling}
    if settings.capacity_blocks:
        lru = POLICIES["lru"].replay(trace, settings.capacity_blocks, PolicyOptions())
        outcomes[("lru", settings.capacity_blocks)] = lru
    # One walk over the sessions serves both the prefix ranking and the attribution.
    use = attribution.session_use(trace, t.session)
    ranking = prefixes.rank(trace, t.session, sessions=use.sessions, scanned=scanned)
    earlier = use.earlier
    parent, depth = scanned.parent, scanned.depth
    # The per-block state goes once its last reader is done (ranking: the session and request
    # counts; the pinned pass: the parents; the prefix rows: the depths), before the pinned
    # pass, which holds the most memory of the analysis, and before the other tables exist.
    del use, scanned
    prefix_rows = shared_prefixes(trace, settings, outcomes, ranking, parent, depth)
    del parent, depth
    groups = Groups.of(trace)
    return {
        "turns": turns_table(trace, log, t, kind),
        "session_stats": session_stats(trace, log, t, groups),
        "shared_prefixes": prefix_rows,
        "hit_sources": hit_sources(trace, t, outcomes, groups, earlier),
        "first_new_blocks": first_new_blocks(trace, outcomes[("ceiling", None)], groups),
        "reuse_times": reuse_times(trace, kind),
    }


@dataclass(frozen=True)
class Groups:
    """The rows of every ``tenant`` value: the fleet (all requests), then each tenant with
    requests in code order (:func:`measure.groups`), as ascending request indices."""

    names: tuple[str, ...]
    rows: tuple[np.ndarray | slice, ...]
    codes: tuple[int, ...]  # -1 for the fleet

    @staticmethod
    def of(trace: Trace) -> Groups:
        order = np.argsort(trace.tenant_codes, kind="stable")
        bounds = np.searchsorted(trace.tenant_codes[order], np.arange(len(trace.tenants) + 1))
        names, rows, codes = [FLEET], [slice(None)], [-1]
        for code, name in enumerate(trace.tenants):
            if bounds[code + 1] > bounds[code]:
                names.append(name)
                rows.append(order[bounds[code] : bounds[code + 1]])
                codes.append(code)
        return Groups(tuple(names), tuple(rows), tuple(codes))

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(zip(self.names, self.rows, strict=True))


def request_kinds(log: RequestLog, t: turns.Turns) -> pa.Array:
    """The log's request type where it has one, else ``first-turn`` / ``follow-up``."""
    fallback = pa.DictionaryArray.from_arrays(
        pa.array((t.turn > 1).astype(np.int8)), pa.array(["first-turn", "follow-up"])
    ).cast(pa.string())
    logged = pa.array(log.request_type, pa.string())
    return pc.if_else(pc.is_valid(logged), logged, fallback)


def session_labels(trace: Trace, log: RequestLog, t: turns.Turns) -> pa.Array:
    """A session's name: the log's session id, ``chat:<chat_id>`` of its first Bailian turn,
    else the request id of its first request."""
    label = _request_ids(trace)
    if log.ids.has_chat.any():
        chat = pc.binary_join_element_wise(
            "chat:", pc.cast(pa.array(log.ids.chat_id), pa.string()), ""
        )
        label = pc.if_else(pa.array(log.ids.has_chat), chat, label)
    if log.ids.has_session.any():
        code = np.maximum(log.ids.session, 0)
        named = pa.array(log.session_names, pa.string()).take(pa.array(code))
        label = pc.if_else(pa.array(log.ids.has_session), named, label)
    return label.take(pa.array(t.session))


def turns_table(trace: Trace, log: RequestLog, t: turns.Turns, kind: pa.Array) -> pa.Table:
    ids = _request_ids(trace)
    has_parent = t.parent >= 0
    parent = np.where(has_parent, t.parent, 0)
    return pa.table(
        {
            "request_id": ids,
            "tenant": pa.array(trace.tenants, pa.string()).take(pa.array(trace.tenant_codes)),
            "session": session_labels(trace, log, t),
            "session_inferred": pa.array(t.session_inferred),
            "parent_request_id": pc.if_else(
                pa.array(has_parent), ids.take(pa.array(parent)), pa.scalar(None, pa.string())
            ),
            "parent_inferred": pa.array(t.parent_inferred),
            "turn": pa.array(t.turn, pa.int32()),
            "turn_inferred": pa.array(t.turn_inferred),
            "request_kind": kind,
            "arrival_ts": _timestamps(trace, trace.times),
            "input_tokens": pa.array(trace.input_tokens, pa.int64()),
            "history_tokens": pa.array(hit_tokens(trace, t.history_blocks), pa.int64()),
            "gap_s": pa.array(trace.times - trace.times[parent], mask=~has_parent),
        }
    )


def session_stats(trace: Trace, log: RequestLog, t: turns.Turns, groups: Groups) -> pa.Table:
    logged = turns.logged_parents(log.ids)
    by_log = log.ids.has_chat | log.ids.has_session
    history = hit_tokens(trace, t.history_blocks)
    index = np.arange(trace.n_requests)
    rows = []
    for name, at in groups:
        parent = t.parent[at]
        follow = parent >= 0
        p = parent[follow]
        child = index[at][follow]
        _, sizes = np.unique(t.session[at], return_counts=True)
        gap = trace.times[child] - trace.times[p]
        growth = (trace.input_tokens[child] - trace.input_tokens[p]).astype(float)
        inp, hist = int(trace.input_tokens[at].sum()), int(history[at].sum())
        checked = by_log[at]
        true_n, guess_n, both = turns.link_accuracy(logged[at][checked], t.inferred[at][checked])
        known = bool(checked.any())
        rows.append(
            {
                "tenant": name,
                "requests": len(parent),
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
    settings: StructureSettings,
    outcomes: dict[tuple[str, int | None], Outcome],
    ranking: prefixes.Ranking,
    parent: np.ndarray,
    depth: np.ndarray,
) -> pa.Table:
    """The ``settings.top`` first prefixes of ``ranking``; ``parent`` and ``depth``: the scan's
    (:class:`Scan`), per dense id."""
    ends = ranking.ends[: settings.top]
    cap = settings.capacity_blocks
    lru_tokens = None
    if cap:
        lru_tokens = int(hit_tokens(trace, outcomes[("lru", cap)].hit_blocks).sum())
    simulated = ends[: settings.simulate_top] if cap else ends[:0]
    pinned = pinned_hit_tokens(trace, simulated, cap, parent)
    rows = []
    for i, (end, use) in enumerate(zip(ends, prefixes.uses(trace, ends, depth), strict=True)):
        times = trace.times[use.requests]
        pinned_tokens = pinned[i] if i < len(pinned) else None
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


def pinned_hit_tokens(
    trace: Trace, ends: np.ndarray, capacity: int | None, parent: np.ndarray, threads: int = 2
) -> list[int | None]:
    """Per prefix end, the hit tokens of ``pinned`` with that prefix pinned (None where its
    blocks do not fit): every prefix in one pass over the trace (``pinned_hit_blocks_many``),
    the prefixes split between ``threads`` passes at once (the compiled loop releases the
    GIL); a pass's only per-block state is one int32, so each adds little to the peak."""
    chains = [pins.chain(parent, int(e)) for e in ends]
    fit = [i for i, c in enumerate(chains) if capacity is not None and len(c) <= capacity]
    out: list[int | None] = [None] * len(chains)
    parts = [p for p in np.array_split(np.array(fit, np.int64), max(1, threads)) if len(p)]

    def one(part: np.ndarray) -> np.ndarray:
        return pinned_hit_blocks_many(trace, int(capacity or 0), [chains[i] for i in part])

    with ThreadPoolExecutor(max_workers=max(1, len(parts))) as pool:
        for part, hits in zip(parts, pool.map(one, parts), strict=True):
            for i, row in zip(part, hits, strict=True):
                out[int(i)] = int(hit_tokens(trace, row).sum())
    return out


def hit_sources(
    trace: Trace,
    t: turns.Turns,
    outcomes: dict[tuple[str, int | None], Outcome],
    groups: Groups,
    earlier: np.ndarray | None = None,
) -> pa.Table:
    rows = []
    for (policy, cap), outcome in outcomes.items():
        split = attribution.split_tokens(trace, t.session, outcome, earlier)
        tokens = hit_tokens(trace, outcome.hit_blocks)
        values = np.column_stack([trace.input_tokens, tokens, split]).astype(np.int64)
        per_tenant = _kernels.group_sums(trace.tenant_codes, values, len(trace.tenants))
        requests = np.bincount(trace.tenant_codes, minlength=len(trace.tenants))
        for name, code in zip(groups.names, groups.codes, strict=True):
            sums = values.sum(axis=0) if code < 0 else per_tenant[code]
            rows.append(
                {
                    "tenant": name,
                    "policy": policy,
                    "capacity_blocks": cap,
                    "requests": trace.n_requests if code < 0 else int(requests[code]),
                    "input_tokens": int(sums[0]),
                    "hit_tokens": int(sums[1]),
                    **{
                        f"{c}_tokens": int(v)
                        for c, v in zip(attribution.CLASSES, sums[2:], strict=True)
                    },
                }
            )
    return pa.Table.from_pylist(rows, schema=HIT_SOURCES_SCHEMA)


def first_new_blocks(trace: Trace, ceiling: Outcome, groups: Groups) -> pa.Table:
    position = ceiling.hit_blocks.astype(np.int64)
    n_blocks = trace.blocks_per_request
    bs = trace.block_size
    rows = []
    for name, at in groups:
        for b in firstnew.histogram(trace, position, at, n_blocks):
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


def reuse_times(trace: Trace, kind: pa.Array) -> pa.Table:
    kinds = kind.dictionary_encode()
    order = np.argsort(np.asarray(kinds.dictionary.to_pylist(), dtype=object))
    names = [kinds.dictionary[int(i)].as_py() for i in order]
    rank_of = np.empty(len(order), np.int64)
    rank_of[order] = np.arange(len(order))
    code = rank_of[kinds.indices.to_numpy()] if len(order) else np.zeros(0, np.int64)
    counts, tokens = reuse.histogram(
        trace,
        trace.tenant_codes.astype(np.int64) * len(names) + code,
        len(trace.tenants) * len(names),
    )
    n_bins = counts.shape[1]
    counts = counts.reshape(len(trace.tenants), len(names), n_bins)
    tokens = tokens.reshape(len(trace.tenants), len(names), n_bins)
    rows = []
    tenant_rows = [(FLEET, counts.sum(axis=0), tokens.sum(axis=0))] + [
        (name, counts[c], tokens[c]) for c, name in enumerate(trace.tenants)
    ]
    for name, c, tok in tenant_rows:
        per_kind = [(ALL_KINDS, c.sum(axis=0), tok.sum(axis=0))] + [
            (k, c[i], tok[i]) for i, k in enumerate(names)
        ]
        for k, cs, ts in per_kind:
            if not cs.any():
                continue
            for (low, high), n, tk in zip(reuse.bins(), cs, ts, strict=True):
                rows.append(
                    {
                        "tenant": name,
                        "request_kind": k,
                        "low_s": low,
                        "high_s": high,
                        "reuses": int(n),
                        "reuse_tokens": int(tk),
                    }
                )
    return pa.Table.from_pylist(rows, schema=REUSE_SCHEMA)


def _request_ids(trace: Trace) -> pa.Array:
    if trace.request_ids is not None:
        return trace.request_ids
    return pc.cast(pa.array(np.arange(trace.n_requests)), pa.string())


def _micros(trace: Trace, seconds: float) -> int:
    return int(round((trace.start_s + float(seconds)) * 1e6))


def _timestamps(trace: Trace, seconds: np.ndarray) -> pa.Array:
    micros = np.round((trace.start_s + seconds) * 1e6).astype(np.int64)
    return pa.array(micros, pa.timestamp("us", tz="UTC"))


def _q(values: np.ndarray, q: float) -> float | None:
    return float(np.quantile(values, q)) if len(values) else None
