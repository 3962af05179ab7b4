"""The planner's answer in words: one paragraph and one table, for the terminal and the page's
opening (``latest_plan`` rows)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from prefixscope.analysis.policies import label
from prefixscope.analysis.trace.measure import FLEET
from prefixscope.dashboards.savings import dollars
from prefixscope.terminal import More, clip

#: The policy the paragraph leads with when the plan has it.
LEAD_POLICY = "lru"


def _capacity(row: dict) -> str:
    return (
        f"{row['capacity_blocks']:,} blocks ({row['capacity_tokens'] / 1e6:,.1f} M tokens, "
        f"{row['capacity_gib']:,.1f} GiB of {row['model']} KV)"
    )


def tier_sentence(row: dict) -> str:
    """Whether a configuration's tiers pay for themselves, as a sentence after its answer ("" for
    a fleet without tiers, or a plan made before they were priced)."""
    saved, own = row.get("tier_usd_saved_per_hour"), row.get("tier_usd_per_hour")
    if saved is None or own is None:
        return ""
    net = saved - own
    verdict = "they pay for themselves" if net > 0 else "they do not pay for themselves"
    return (
        f" Its tiers save ${saved:,.2f} of GPU time an hour and cost ${own:,.2f}: net "
        f"{dollars(net)} an hour, {verdict} at this load."
    )


def _fleet(row: dict) -> str:
    tiers = []
    if row["dram_blocks"]:
        tiers.append(f"{row['dram_blocks']:,} DRAM blocks each")
    if row["store_unbounded"]:
        tiers.append("an unbounded shared store")
    elif row["store_blocks"] is not None:
        tiers.append(f"a shared store of {row['store_blocks']:,} blocks")
    extra = f" with {' and '.join(tiers)}" if tiers else ""
    if row["replicas"] is None:
        return "no fleet"
    policy = row.get("policy")
    caches = f", {policy} caches" if policy and policy != "lru" else ""
    return f"{_replicas(row)}{extra}, {row['router']} routing{caches}"


def _replicas(row: dict) -> str:
    """The fleet in GPUs (``4 × H100 (llama-3-8b, 55.4 GiB of KV each)``), the KV each
    replica holds in the trace's blocks; in blocks for a plan made before GPUs were named."""
    n, gpu, gpus = row["replicas"], row.get("fleet_gpu"), row.get("gpus") or 1
    if not gpu:
        return f"{n} replicas × {row['capacity_blocks']:,} blocks"
    kv = f"{row['model']}, {row['capacity_gib']:,.1f} GiB of KV each"
    if gpus == 1:
        return f"{n} × {gpu.upper()} ({kv})"
    return f"{n} × {gpu.upper()}x{gpus} ({n * gpus} GPUs; {kv})"


def _series(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def sentences(rows: Sequence[dict]) -> list[str]:
    """The answer for the fleet, in sentences: the smallest cache per policy (LRU first), the
    value of the next GiB, the cheapest fleet, and what the numbers cannot say."""
    fleet = [r for r in rows if r["tenant"] == FLEET]
    caps = sorted(
        (r for r in fleet if r["kind"] == "capacity"),
        key=lambda r: (r["policy"] != LEAD_POLICY, r["policy"]),
    )
    out = []
    if caps:
        first = caps[0]
        share, window = first["target_share"], first["measure_window"]
        lead = (
            f"To keep {share:.0%} of the ceiling (a token hit rate of "
            f"{first['target_token_hit_rate']:.4f} of the unbounded cache's "
            f"{first['ceiling_token_hit_rate']:.4f}, window {window}), "
        )
        r = caps[0]
        name = label(r["policy"])
        if not r["reached"]:
            text = (
                f"one {name} cache does not reach it within the capacities simulated (the "
                f"largest, {r['largest_capacity_blocks']:,} blocks, keeps "
                f"{r['token_hit_rate']:.4f})"
            )
        elif r["method"].startswith("exact"):
            text = f"one {name} cache needs {_capacity(r)}"
        else:
            text = (
                f"one {name} cache reaches it at {_capacity(r)}, the smallest capacity "
                f"simulated that does (the next smaller, {r['bracket_low_blocks']:,} blocks, "
                "does not)"
            )
        if r["reached"] and r["marginal_gpu_seconds_per_hour_per_gib"] is not None:
            text += (
                f"; there the next GiB saves "
                f"{r['marginal_gpu_seconds_per_hour_per_gib']:,.3g} prefill GPU-seconds an hour"
            )
        if r["reached"] and r["steady"] is False:
            text += "; the trace never fills a cache of this size, so this is a cold start"
        out.append(lead + text + ".")
        others = [
            f"{label(o['policy'])} "
            + (f"{o['capacity_blocks']:,} blocks" if o["reached"] else "beyond what was simulated")
            for o in caps[1:]
        ]
        if others:
            out.append(
                "The other policies simulated reach it at: "
                + _series(others)
                + " (the smallest capacities simulated that do; the table says more)."
            )
    configs = [r for r in fleet if r["kind"] == "configuration"]
    for r in configs:
        if r["reached"]:
            out.append(
                f"The cheapest simulated fleet that reaches it: {_fleet(r)}, at "
                f"${r['cost_per_hour']:,.2f} an hour (token hit rate {r['token_hit_rate']:.4f}, "
                f"TTFT p95 {r['ttft_p95_s']:.2f} s)."
                + tier_sentence(r)
            )
        else:
            out.append(f"No simulated fleet reaches the target: {r['note']}.")
    if caps and not configs:
        out.append("No fleet was simulated: run `prefixscope fleet` to price configurations.")
    return out


def answer_text(rows: Sequence[dict], width: int = 100, more: More | None = None) -> str:
    """The paragraph, wrapped, then one line per fleet row (at most ``terminal.MAX_ROWS``
    with ``more``)."""
    lines = textwrap.wrap(" ".join(sentences(rows)), width)
    lines.append("")
    lines.append(
        f"{'kind':<14} {'policy':<8} {'capacity':>14} {'GiB':>9} {'rate':>7} {'reached':>7} "
        f"{'next GiB GPU-s/h':>16} {'fleet':<40} {'$/h':>8}"
    )
    table = []
    for r in rows:
        if r["tenant"] != FLEET:
            continue
        cap = f"{r['capacity_blocks']:,} blk" if r["capacity_blocks"] is not None else "—"
        gib = f"{r['capacity_gib']:,.1f}" if r["capacity_gib"] is not None else "—"
        marginal = r["marginal_gpu_seconds_per_hour_per_gib"]
        fleet = _fleet(r) if r["kind"] == "configuration" else ""
        cost = f"{r['cost_per_hour']:,.2f}" if r["cost_per_hour"] is not None else ""
        table.append(
            f"{r['kind']:<14} {r['policy']:<8} {cap:>14} {gib:>9} "
            f"{r['token_hit_rate']:>7.4f} {'yes' if r['reached'] else 'no':>7} "
            f"{'' if marginal is None else f'{marginal:,.1f}':>16} {fleet[:40]:<40} {cost:>8}"
        )
    return "\n".join([*lines, *clip(table, more)])


def plan_section(rows: Sequence[dict], lead: Sequence[str] = ()) -> dict | None:
    """The page's opening: the paragraph (``lead`` first: the SLO plan's fleet in GPUs), and
    one table of every plan row (fleet first), with the stored result each figure comes from.
    None when no plan was made."""
    if not rows and not lead:
        return None
    table = []
    for r in rows:
        table.append(
            {
                "fleet": r["tenant"] == FLEET,
                "tenant": "fleet" if r["tenant"] == FLEET else r["tenant"],
                "what": f"{r['policy']} cache" if r["kind"] == "capacity" else _fleet(r),
                "capacity": "—"
                if r["capacity_blocks"] is None
                else f"{r['capacity_blocks']:,} blocks",
                "gib": "—" if r["capacity_gib"] is None else f"{r['capacity_gib']:,.1f}",
                "rate": f"{r['token_hit_rate']:.4f}",
                "target": f"{r['target_token_hit_rate']:.4f}",
                "reached": "yes" if r["reached"] else "no",
                "marginal": ""
                if r["marginal_gpu_seconds_per_hour_per_gib"] is None
                else f"{r['marginal_gpu_seconds_per_hour_per_gib']:,.3g}",
                "cost": "" if r["cost_per_hour"] is None else f"${r['cost_per_hour']:,.2f}",
                "source": f"{r['source_table']} ({r['source_run_id']})",
                "note": r["note"] or "",
            }
        )
    return {"sentences": [*lead, *sentences(rows)], "rows": table}
