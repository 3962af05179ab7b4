"""A curve: the token hit rate at every cache capacity, for the fleet and each tenant, and the
``mrc`` rows it becomes (docs/schema.md).

- ``lru``: one pass (``exact.py`` over ``stack.py``). LRU here is a stack algorithm, so the
  hit tokens at every capacity from 1 block to the working set come from one replay, and equal
  what ``simulate`` gives at each capacity, to the token.
- every other bounded policy: the simulator itself at a grid of capacities (``grid.py``).
- ``sample_rate < 1``: an estimate from a spatial sample, flagged ``exact = false``, its
  capacities scaled by ``1 / rate``: of blocks (``block_sampling.py``, ``sampled.py``: LRU
  only) or of prefix families (``sampling.py``: any policy).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa

from prefixscope.analysis.cost.models import GIB, resolve_model
from prefixscope.analysis.curves.settings import CurveSettings
from prefixscope.analysis.trace.csr import Trace

MRC_SCHEMA = pa.schema(
    [
        ("tenant", pa.string()),
        ("policy", pa.string()),
        ("isolation", pa.string()),
        ("measure_window", pa.string()),
        ("method", pa.string()),
        ("capacity_blocks", pa.int64()),
        ("capacity_tokens", pa.int64()),
        ("capacity_gib", pa.float64()),
        ("model", pa.string()),
        ("kv_dtype", pa.string()),
        ("block_size", pa.int32()),
        ("requests", pa.int64()),
        ("input_tokens", pa.int64()),
        ("hit_tokens", pa.int64()),
        ("token_hit_rate", pa.float64()),
        ("exact", pa.bool_()),
        ("sample_rate", pa.float64()),
        ("sample_by", pa.string()),
        ("sampled_blocks", pa.int64()),
        ("ci_low", pa.float64()),
        ("ci_high", pa.float64()),
    ]
)


@dataclass(frozen=True)
class Measured:
    """Sums over one group's measured requests at each listed capacity (arrays by point). A
    sampled group also says how many blocks its estimate rests on (``sampled_blocks``) and,
    when it has one, the 95% interval of its hit tokens (``low`` .. ``high``)."""

    tenant: str
    window: str
    requests: np.ndarray
    input_tokens: np.ndarray
    hit_tokens: np.ndarray
    sampled_blocks: int | None = None
    low: np.ndarray | None = None
    high: np.ndarray | None = None


@dataclass(frozen=True)
class Curve:
    """One cache's curve: at each capacity (``capacity_blocks``, on the cache's own scale),
    the sums of every (window, tenant) group."""

    capacity_blocks: np.ndarray
    groups: list[Measured] = field(default_factory=list)


def capacity_points(working_set: int, n: int, asked: Sequence[int] = ()) -> np.ndarray:
    """At least ``min(n, working_set)`` distinct capacities, log-spaced from 1 block to the
    working set (where LRU holds every block and meets the ceiling), plus those ``asked``."""
    top = max(1, int(working_set))
    want = min(n, top)
    k = want
    while True:
        grid = np.unique(np.round(np.geomspace(1, top, k)).astype(np.int64))
        if len(grid) >= want:
            break
        k += max(1, want - len(grid))
    return np.unique(np.concatenate([grid, np.asarray(asked, dtype=np.int64)]))


def drawn_blocks(trace: Trace, drawn: np.ndarray | None = None) -> np.ndarray:
    """Per tenant code, the distinct blocks of a sampled trace its requests look up (at
    ``[n_tenants]``, the fleet's): what a sampled curve's estimate rests on. ``drawn``: the
    lookups that count (a block sample's blocks sampled at the rate, not those kept whole)."""
    n = len(trace.tenants)
    drawn = np.ones(trace.n_lookups, np.bool_) if drawn is None else drawn
    code = trace.tenant_codes[trace.request_of_lookup][drawn].astype(np.int64)
    blocks = trace.blocks[drawn].astype(np.int64)
    per = np.bincount(np.unique(code << 32 | blocks) >> 32, minlength=n + 1)
    per[n] = len(np.unique(blocks))
    return per


def with_drawn_blocks(curve: Curve, trace: Trace) -> Curve:
    """``curve`` of a family sample (``trace``), each group with the blocks it rests on."""
    per = drawn_blocks(trace)
    code = {name: i for i, name in enumerate(trace.tenants)}
    groups = [
        replace(g, sampled_blocks=int(per[code.get(g.tenant, len(trace.tenants))]))
        for g in curve.groups
    ]
    return Curve(curve.capacity_blocks, groups)


def sampled_capacities(settings: CurveSettings) -> list[int]:
    """The capacities asked for, on the sample's scale (a sampled block stands for 1 / rate)."""
    return [max(1, round(c * settings.sample_rate)) for c in settings.capacities]


def curve_table(block_size: int, curves: Sequence[Curve], settings: CurveSettings) -> pa.Table:
    """The ``mrc`` rows of ``curves``, their capacities on the full trace's scale."""
    shape = (
        resolve_model(settings.model, settings.model_config)
        if (settings.model or settings.model_config)
        else None
    )
    asked = dict(zip(sampled_capacities(settings), settings.capacities, strict=True))
    return _table(block_size, curves, settings, shape, asked)


def _table(block_size, curves, settings, shape, asked) -> pa.Table:  # type: ignore[no-untyped-def]
    rate = settings.sample_rate
    cols: dict[str, list] = {f.name: [] for f in MRC_SCHEMA}
    method = "stack" if settings.stack else "grid"
    for curve in curves:
        # Capacities on the full trace's scale: a sampled cache of c blocks stands for c / rate.
        scaled = [asked.get(int(c), round(int(c) / rate)) for c in curve.capacity_blocks]
        for g in curve.groups:
            k = len(scaled)
            cols["tenant"] += [g.tenant] * k
            cols["measure_window"] += [g.window] * k
            cols["capacity_blocks"] += scaled
            cols["requests"] += g.requests.tolist()
            cols["input_tokens"] += g.input_tokens.tolist()
            cols["hit_tokens"] += g.hit_tokens.tolist()
            cols["token_hit_rate"] += _rates(g.hit_tokens, g.input_tokens)
            cols["sampled_blocks"] += [g.sampled_blocks] * k
            cols["ci_low"] += _rates(g.low, g.input_tokens) if g.low is not None else [None] * k
            cols["ci_high"] += _rates(g.high, g.input_tokens) if g.high is not None else [None] * k
    n = len(cols["tenant"])
    cols["policy"] = [settings.policy] * n
    cols["isolation"] = [settings.isolation] * n
    cols["method"] = [method] * n
    cols["capacity_tokens"] = [c * block_size for c in cols["capacity_blocks"]]
    per_block = shape.kv_bytes_per_token(settings.kv_dtype) * block_size if shape else None
    cols["capacity_gib"] = [
        c * per_block / GIB if per_block else None for c in cols["capacity_blocks"]
    ]
    cols["model"] = [shape.name if shape else None] * n
    cols["kv_dtype"] = [settings.kv_dtype if shape else None] * n
    cols["block_size"] = [block_size] * n
    cols["exact"] = [rate == 1] * n
    cols["sample_rate"] = [rate] * n
    cols["sample_by"] = [settings.sample_by if rate < 1 else None] * n
    return pa.table(cols, schema=MRC_SCHEMA)


def _rates(tokens: np.ndarray, input_tokens: np.ndarray) -> list[float | None]:
    """Hit tokens over input tokens, capped at 1 (an interval's end may estimate more tokens
    than were sent); None where nothing was measured."""
    return [
        min(h / i, 1.0) if i else None
        for h, i in zip(np.asarray(tokens).tolist(), input_tokens.tolist(), strict=True)
    ]
