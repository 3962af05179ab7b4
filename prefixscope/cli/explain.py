"""``prefixscope explain``: one request, block by block — hit or miss, when each block was last
used and by whom, its stack depth, and why a miss was a miss."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from prefixscope.analysis.fleet.engines import ENGINES
from prefixscope.analysis.fleet.routers import ROUTERS
from prefixscope.analysis.policies import POLICIES
from prefixscope.cli import flags
from prefixscope.cli.command import Command
from prefixscope.terminal import More, clip

if TYPE_CHECKING:
    from prefixscope.stages.explain import ExplainResult


def arguments(p: argparse.ArgumentParser) -> None:
    flags.warehouse(p)
    p.add_argument(
        "--request",
        required=True,
        type=flags.utf8_text,
        metavar="ID",
        help="a request_id, or a log request id",
    )
    p.add_argument("--policy", default="lru", choices=list(POLICIES), help="(%(default)s)")
    p.add_argument(
        "--capacity-blocks",
        type=flags.positive_int,
        metavar="N",
        help="cache capacity (default: the middle of the simulated ones, else structure's)",
    )
    p.add_argument(
        "--ttl", type=flags.finite_float(), metavar="SECONDS", help="ttl: idle time before a drop"
    )
    p.add_argument("--pin", metavar="FILE", help="pinned: prefix hashes to keep")
    p.add_argument(
        "--pin-top", type=flags.positive_int, metavar="K", help="pinned: the K most shared prefixes"
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    fleet = p.add_argument_group(
        "in a fleet", "explain the request in a fleet: the miss budget's part of each block"
    )
    fleet.add_argument("--router", choices=list(ROUTERS), help="the fleet's router")
    fleet.add_argument(
        "--replicas", type=flags.positive_int, default=1, metavar="N", help="(%(default)s)"
    )
    fleet.add_argument("--engine", choices=list(ENGINES), default="ideal", help="(%(default)s)")
    fleet.add_argument(
        "--load-scale", type=flags.finite_float(), default=1.0, metavar="S", help="(%(default)s)"
    )
    fleet.add_argument(
        "--router-delay",
        type=flags.finite_float(0.0, flags.MAX_ROUTER_DELAY_MS, strict=False),
        default=0.0,
        metavar="MS",
        help="kv-aware routes on the caches as they were MS ago (%(default)s)",
    )


def explain_command(args: argparse.Namespace) -> int:
    from prefixscope.stages import explain

    more = More(command="the same command with --json")
    if args.router is not None:
        from prefixscope.cli.explain_fleet import fleet_explain_json, format_fleet_explain

        found = explain.explain_in_a_fleet(args.warehouse, _settings(args))
        text = json.dumps(fleet_explain_json(found), indent=2) if args.json else None
        print(text or format_fleet_explain(found, more))
        return 0
    result = explain.explain_requests(args.warehouse, _settings(args))
    print(json.dumps(as_json(result), indent=2) if args.json else format_explain(result, more))
    return 0


def _settings(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from prefixscope.stages.explain import ExplainSettings

    return ExplainSettings(
        request=args.request, policy=args.policy, capacity_blocks=args.capacity_blocks,
        ttl_s=args.ttl, pin_file=args.pin, pin_top=args.pin_top, router=args.router,
        replicas=args.replicas, engine=args.engine, load_scale=args.load_scale,
        router_delay_s=args.router_delay / 1e3,
    )  # fmt: skip


#: A relation (``explain.RELATIONS``) as the summary says it.
WHO = {
    "same session": "the same session",
    "other session": "another session",
    "same tenant": "the same tenant",
    "other tenant": "another tenant",
}
COLUMNS = ("block", "hash", "hit", "cached", "why", "depth", "last used by", "ago", "relation")


def format_explain(result: ExplainResult, more: More | None = None) -> str:
    """The header, one row per block (at most ``terminal.MAX_ROWS`` with ``more``), and the
    one-line summary."""
    e = result.explanation
    where = f" ({result.capacity_from})" if result.capacity_from else ""
    capacity = " (unbounded)" if e.capacity_blocks is None else f" at {e.capacity_blocks:,} blocks"
    lines = [
        f"request {result.request_id}: tenant {result.tenant}, session {result.session or '-'}, "
        f"{e.input_tokens:,} tokens in {len(e.blocks)} blocks of {result.block_size}",
        f"cache: {e.policy}{capacity}{where}",
        f"sessions: {result.sessions_from}",
        "",
    ]
    rows = [
        (
            str(b.position),
            _short_hash(b.block_hash),
            "hit" if b.hit else "miss",
            {True: "yes", False: "no", None: "?"}[b.cached],
            b.reason,
            "-" if b.depth is None else f"{b.depth:,}",
            last or "-",
            "-" if b.last_ago_s is None else _ago(b.last_ago_s),
            b.last_by or "-",
        )
        for b, last in zip(e.blocks, result.last_request_ids, strict=True)
    ]
    widths = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(COLUMNS)]
    right = {0, 5, 7}
    table = []
    for row in [COLUMNS, *rows]:
        cells = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        table.append("  ".join(cells).rstrip())
    lines += [table[0], *clip(table[1:], more, "blocks")]
    lines += ["", summary(result)]
    return "\n".join(lines)


def summary(result: ExplainResult) -> str:
    e = result.explanation
    n = len(e.blocks)
    text = (
        f"summary: {e.hit_blocks} of {n} blocks hit ({e.hit_tokens:,} of {e.input_tokens:,} tokens)"
    )
    if e.recomputes_last_block and e.hit_blocks == n and n:
        text += ", the last one recomputed all the same (the last-token rule)"
    miss = e.first_miss
    if miss is None:
        return text
    text += f"; first miss at block {miss.position}: {miss.reason}"
    if miss.last_ago_s is not None:
        depth = f"depth {miss.depth:,}" if e.policy == "lru" else f"LRU depth {miss.depth:,}"
        if e.policy == "lru":  # a stack algorithm: the depth alone decides
            depth += f" {'>' if miss.depth > e.capacity_blocks else '<='} {e.capacity_blocks:,}"
        text += f" (last used {_ago(miss.last_ago_s)} ago by {WHO[miss.last_by]}, {depth})"
    after = e.blocks[miss.position + 1 :]
    if after:
        cached = sum(1 for b in after if b.cached)
        unknown = sum(1 for b in after if b.cached is None)
        never = sum(1 for b in after if b.last_request is None)
        held = f"{cached} still cached" + (f", {unknown} unknown" if unknown else "")
        text += f"; {len(after)} blocks after it ({held}, {never} never seen)"
    return text


def as_json(result: ExplainResult) -> dict[str, Any]:
    e = result.explanation
    return {
        "request_id": result.request_id,
        "tenant": result.tenant,
        "session": result.session,
        "sessions_from": result.sessions_from,
        "policy": e.policy,
        "capacity_blocks": e.capacity_blocks,
        "capacity_from": result.capacity_from,
        "block_size": result.block_size,
        "input_tokens": e.input_tokens,
        "hit_blocks": e.hit_blocks,
        "hit_tokens": e.hit_tokens,
        "recomputes_last_block": e.recomputes_last_block,
        "blocks": [
            {
                "position": b.position,
                "block_hash": f"{b.block_hash:016x}",
                "hit": b.hit,
                "cached": b.cached,
                "reason": b.reason,
                "depth": b.depth,
                "last_request_id": last,
                "last_ago_s": b.last_ago_s,
                "last_by": b.last_by,
            }
            for b, last in zip(e.blocks, result.last_request_ids, strict=True)
        ],
    }


def _short_hash(value: int) -> str:
    text = f"{value:x}"
    return text if len(text) <= 10 else text[:10] + "…"


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


COMMAND = Command(
    "explain",
    "one request block by block: hit or miss, last use and by whom, and why",
    arguments,
    explain_command,
)
