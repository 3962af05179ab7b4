"""``prefixscope explain --router …``: one request in a fleet, block by block, by the part of
the miss budget each block fell in (``analysis/fleet/explain.py``), as a table or JSON."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from prefixscope.terminal import More, clip

if TYPE_CHECKING:
    from prefixscope.stages.explain import FleetExplainResult

COLUMNS = ("block", "hash", "tokens", "part", "lever")


def format_fleet_explain(result: FleetExplainResult, more: More | None = None) -> str:
    """The header, one row per block (at most ``terminal.MAX_ROWS`` with ``more``), and the
    request's tokens by part."""
    e, f = result.explanation, result.fleet
    lines = [
        f"request {result.request_id}: tenant {result.tenant}, {e.input_tokens:,} tokens in "
        f"{len(e.blocks)} blocks of {result.block_size}",
        f"fleet: {f.replicas} × {f.capacity_blocks:,} blocks ({result.capacity_from}), router "
        f"{f.router}{f' (its view {f.router_delay_s * 1e3:g} ms old)' if f.router_delay_s else ''}"
        f", engine {f.engine}, {f.policy_label}, load ×{f.load_scale:g}; routed to "
        f"replica {e.replica}",
        "",
    ]
    rows = [
        (str(b.position), _short(b.block_hash), f"{b.tokens:,}", b.part, b.lever or "-")
        for b in e.blocks
    ]
    widths = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(COLUMNS)]
    table = [
        "  ".join(
            c.rjust(w) if i in (0, 2) else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in [COLUMNS, *rows]
    ]
    lines += [table[0], *clip(table[1:], more, "blocks"), ""]
    parts = ", ".join(f"{p.replace('_', ' ')} {n:,}" for p, n in e.parts.items())
    lines.append(f"tokens by part: {parts} (of {e.input_tokens:,})")
    return "\n".join(lines)


def fleet_explain_json(result: FleetExplainResult) -> dict[str, Any]:
    e, f = result.explanation, result.fleet
    return {
        "request_id": result.request_id,
        "tenant": result.tenant,
        "router": f.router,
        "replicas": f.replicas,
        "capacity_blocks": f.capacity_blocks,
        "capacity_from": result.capacity_from,
        "engine": f.engine,
        "policy": f.policy_label,
        "load_scale": f.load_scale,
        "router_delay_ms": f.router_delay_s * 1e3,
        "replica": e.replica,
        "block_size": result.block_size,
        "input_tokens": e.input_tokens,
        "hit_tokens": e.hit_tokens,
        "tokens_by_part": e.parts,
        "blocks": [
            {
                "position": b.position,
                "block_hash": f"{b.block_hash:016x}",
                "tokens": b.tokens,
                "part": b.part,
                "lever": b.lever,
            }
            for b in e.blocks
        ],
    }


def _short(value: int) -> str:
    text = f"{value:x}"
    return text if len(text) <= 10 else text[:10] + "…"
