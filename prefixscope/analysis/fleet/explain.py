"""One request in a fleet, block by block: which part of the miss budget each block fell in
(``budget.py``), from the fleet run with that request watched (``explain --router``).

A block of the request is ``hit``, or one of the budget's unserved parts; a block past the
prompt's tokens (a hash-id trace naming more blocks than its tokens fill) holds no token and
is ``no tokens``. Under a pool engine the blocks are those it hashes (whole ones only).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from prefixscope.analysis.fleet import _records
from prefixscope.analysis.fleet.budget import LEVERS, MISSES, PARTS, per_request
from prefixscope.analysis.fleet.engines import resolve_engine
from prefixscope.analysis.fleet.run import Engine, Fleet, Traffic, simulate_fleet
from prefixscope.analysis.trace.csr import Trace
from prefixscope.analysis.trace.full_blocks import full_blocks_only


@dataclass(frozen=True)
class FleetBlock:
    position: int
    block_hash: int
    tokens: int
    part: str  # "hit", a part of ``budget.MISSES``, or "no tokens"
    lever: str | None


@dataclass(frozen=True)
class FleetExplanation:
    request: int  # index in replay order
    replica: int
    replicas: int
    input_tokens: int
    hit_tokens: int
    blocks: tuple[FleetBlock, ...]
    #: the request's tokens by part (``budget.PARTS``), its unhashed tail included
    parts: dict[str, int]


def explain_in_fleet(
    trace: Trace, traffic: Traffic, fleet: Fleet, engine: Engine, r: int
) -> FleetExplanation:
    """Request ``r`` in ``fleet``: the whole fleet is simulated, the budget kept, ``r``
    watched."""
    out = simulate_fleet(trace, traffic, fleet, engine, budget=True, watch=r)
    assert out.why is not None
    seen = trace if not resolve_engine(fleet.engine).pooled else full_blocks_only(trace)
    start, end = int(seen.offsets[r]), int(seen.offsets[r + 1])
    hashes = seen.hashes[seen.blocks[start:end]]
    inp, bs = int(seen.input_tokens[r]), seen.block_size
    blocks = []
    for j, code in enumerate(out.why.tolist()):
        tokens = min(max(inp - j * bs, 0), bs)
        if code == _records.HIT:
            part = "hit"
        elif code == _records.NOT_LOOKED_UP or tokens == 0:
            part = "no tokens"
        else:
            part = MISSES[code][0]
        blocks.append(FleetBlock(j, int(hashes[j]), tokens, part, LEVERS.get(part)))
    row = per_request(out)[r]
    return FleetExplanation(
        request=r,
        replica=int(out.replica[r]),
        replicas=fleet.replicas,
        input_tokens=inp,
        hit_tokens=int(out.hit_tokens[r]),
        blocks=tuple(blocks),
        parts={p: int(v) for p, v in zip(PARTS, np.asarray(row).tolist(), strict=True) if v},
    )
