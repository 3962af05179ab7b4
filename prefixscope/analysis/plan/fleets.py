"""The planner's ``configuration`` rows: per tenant, the cheapest simulated fleet that reaches
the target, priced in GPUs.

A fleet costs its GPUs (replicas × GPUs per replica × the GPU's price per hour, ``prices.py``),
each replica's DRAM tier and the shared store. A row whose capacity is more than its GPUs' HBM
holds (``exceeds_hbm``: a what-if) is a fleet that cannot exist, so it is never the answer,
whatever it costs; a row that cannot be judged (NULL: a GPU without an HBM figure, or a
warehouse written before the column) is priced as it says.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from prefixscope.analysis.cost.deployment import parse_deployment
from prefixscope.analysis.cost.gpus import GpuSpec
from prefixscope.analysis.cost.models import resolve_model
from prefixscope.analysis.cost.prices import Prices
from prefixscope.analysis.plan.plan import PLAN_SCHEMA, Sizing
from prefixscope.analysis.trace.measure import FLEET


def fleet_gpu(row: dict) -> tuple[GpuSpec | str, int]:
    """The GPU of a fleet row's replicas and how many each: its deployment's (a spec, read
    once: a GPU file's own price included), else the name of the GPU that priced its steps.
    A row :func:`with_file_gpus` resolved carries its GPU."""
    if "_gpu" in row:
        return row["_gpu"]
    if row.get("deployment"):
        d = parse_deployment(row["deployment"])
        return d.gpu, d.tp
    return str(row["gpu"]), 1


def with_file_gpus(
    rows: Sequence[dict], files: Mapping[str, GpuSpec]
) -> tuple[list[dict], set[str]]:
    """The rows this process can price, each with its GPU, and the deployments of those it
    cannot. A deployment's GPU from a TOML file is stored by its name (``h20x1``), which only
    the file names: rows name a GPU of ``files`` (name → spec: the files given to this
    command), or of the catalog, or are left out."""
    out, unknown = [], set()
    for r in rows:
        try:
            out.append({**r, "_gpu": fleet_gpu(r)})
            continue
        except ValueError:
            pass
        m = re.fullmatch(r"(?P<gpu>.+?)(?:x(?P<tp>\d+))?", str(r.get("deployment") or ""))
        spec = files.get(m.group("gpu").lower()) if m else None
        if spec is None:
            unknown.add(str(r.get("deployment")))
            continue
        out.append({**r, "_gpu": (spec, int(m.group("tp") or 1))})
    return out, unknown


def _name(gpu: GpuSpec | str) -> str:
    return gpu.name if isinstance(gpu, GpuSpec) else gpu


def configuration_rows(
    fleet_rows: Sequence[dict],
    window: str,
    target: float,
    prices: Prices,
    sizing: Sizing,
    working_set_blocks: int,
    load_scale: float = 1.0,
    files: Mapping[str, GpuSpec] | None = None,
) -> list[dict]:
    """The ``configuration`` rows: per tenant, the cheapest simulated fleet configuration (at
    ``load_scale``) that fits its HBM and whose token hit rate reaches ``target`` × its
    ceiling. An unbounded store is priced at the working set (every distinct block), the most
    it can hold. Fleets on a GPU from a file not among ``files`` are not priced (named in the
    rows' note); where no fleet is left, a ValueError says which file to give."""
    fleet_rows, unknown = with_file_gpus(fleet_rows, files or {})
    if unknown and not fleet_rows:
        raise ValueError(
            f"the fleets simulated ran on {', '.join(sorted(unknown))}, a GPU from a file — "
            "give plan --gpu FILE.toml (that file) to price them"
        )
    unpriced = (
        f"fleets on {', '.join(sorted(unknown))} not priced (a GPU from a file this plan was "
        "not given)"
        if unknown
        else ""
    )
    by_tenant: dict[str, list[dict]] = {}
    for r in fleet_rows:
        if r["measure_window"] == window and r["load_scale"] == load_scale:
            by_tenant.setdefault(r["tenant"], []).append(r)
    out = []
    for tenant in sorted(by_tenant, key=lambda t: (t != FLEET, t)):
        mine = by_tenant[tenant]
        ceiling = mine[0]["ceiling_token_hit_rate"] or 0.0
        goal = target * ceiling
        fits = [r for r in mine if r.get("exceeds_hbm") is not True]
        base = {
            "kind": "configuration",
            "tenant": tenant,
            "measure_window": window,
            "target_share": target,
            "ceiling_token_hit_rate": ceiling,
            "target_token_hit_rate": goal,
            "model": sizing.model,
            "gpu": sizing.gpu,
            "cost_model": sizing.cost_model,
            "source_table": "fleet_hit_rates",
        }
        if not fits:
            out.append(_none_fits(base, mine))
            continue
        priced = [(_cost(r, prices, sizing, working_set_blocks), r["ttft_p95_s"] or 0.0, r)
                  for r in fits]  # fmt: skip
        good = [p for p in priced if (p[2]["token_hit_rate"] or 0.0) >= goal - 1e-12]
        reached = bool(good)
        cost, _, best = min(good, key=lambda p: (p[0], p[1])) if good else max(
            priced, key=lambda p: (p[2]["token_hit_rate"] or 0.0, -p[0])
        )  # fmt: skip
        gpu, gpus = fleet_gpu(best)
        note = (
            ""
            if reached
            else f"the closest ({best['replicas']} × {_name(gpu).upper()}"
            f"{f'x{gpus}' if gpus > 1 else ''}, {best['router']} routing) keeps "
            f"{best['token_hit_rate'] or 0:.4f}: simulate more replicas, GPUs per replica or "
            "tiers"
        )
        if best.get("filled") is False:
            note = "; ".join(x for x in (note, "its caches never filled: no steady state") if x)
        tier_saved, tier_cost = tier_dollars(best, cost, prices) if tenant == FLEET else (
            None, None
        )  # fmt: skip
        note = "; ".join(x for x in (note, unpriced) if x)
        skipped = len(mine) - len(fits)
        if skipped:
            note = "; ".join(x for x in (note, f"{skipped} simulated configurations hold more "
                                         "KV than their GPUs' HBM: not priced") if x)  # fmt: skip
        out.append(
            {
                **base,
                "policy": best["policy"],
                "reached": reached,
                "capacity_blocks": best["capacity_blocks"],
                "capacity_tokens": best["capacity_tokens"],
                "capacity_gib": _gib(best, sizing, best["capacity_blocks"]),
                "model": best.get("model") or sizing.model,
                "token_hit_rate": best["token_hit_rate"],
                "method": f"cheapest of {len(priced)} simulated configurations that fit",
                "router": best["router"],
                "replicas": best["replicas"],
                "dram_blocks": best["dram_blocks"],
                "store_blocks": best["store_blocks"],
                "store_unbounded": best["store_unbounded"],
                "load_scale": best["load_scale"],
                "cost_per_hour": cost,
                "ttft_p95_s": best["ttft_p95_s"],
                "steady": best.get("filled"),
                "source_run_id": best["run_id"],
                "note": note,
                "deployment": best.get("deployment"),
                "gpus": gpus,
                "fleet_gpu": _name(gpu),
                "gpu_hour": prices.gpu_price(gpu),
                "tier_usd_saved_per_hour": tier_saved,
                "tier_usd_per_hour": tier_cost,
            }
        )
    return out


def tier_dollars(r: dict, cost: float, prices: Prices) -> tuple[float | None, float | None]:
    """What the fleet ``r``'s tiers are worth at ``prices``: the GPU dollars their hits save an
    hour, and their own price an hour (``cost`` less the GPUs'); (None, None) without a tier,
    or without a saving to price (a row written before the split by tier, no traffic span)."""
    if not (r.get("dram_blocks") or r.get("store_blocks") or r.get("store_unbounded")):
        return None, None
    span = r.get("traffic_seconds")
    parts = (r.get("gpu_seconds_saved_dram"), r.get("gpu_seconds_saved_store"))
    if not span or parts[0] is None or parts[1] is None:
        return None, None
    gpu, gpus = fleet_gpu(r)
    saved = (parts[0] + parts[1]) / span * prices.gpu_price(gpu)
    return saved, cost - prices.per_hour(r["replicas"], 0.0, 0.0, gpus, gpu)


def _gib(r: dict, sizing: Sizing, blocks: int) -> float:
    """``blocks`` of the fleet row's own model's KV, GiB: the plan's ``--model`` prices only
    rows of that model (a fleet run on another, the demo's deepseek-v3 beside the default
    llama-3-8b, holds KV of its own size)."""
    model = r.get("model")
    if not model or model == sizing.model:
        return sizing.gib(blocks)
    try:
        shape = resolve_model(model)
    except ValueError:  # a config's model, known by name only: its blocks at the plan's size
        return sizing.gib(blocks)
    return blocks * int(r["block_size"]) * shape.kv_bytes_per_token(sizing.kv_dtype) / 2**30


def _cost(r: dict, prices: Prices, sizing: Sizing, working_set_blocks: int) -> float:
    dram_gb = _gib(r, sizing, r["dram_blocks"] or 0) * 2**30 / 1e9
    store = working_set_blocks if r["store_unbounded"] else (r["store_blocks"] or 0)
    store_gb = _gib(r, sizing, store) * 2**30 / 1e9
    gpu, gpus = fleet_gpu(r)
    return prices.per_hour(r["replicas"], dram_gb, store_gb, gpus, gpu)


def _none_fits(base: dict, rows: Sequence[dict]) -> dict:
    """No simulated fleet fits its HBM: no answer, and which to simulate instead."""
    best = max(rows, key=lambda r: r["token_hit_rate"] or 0.0)
    return {
        **dict.fromkeys(PLAN_SCHEMA.names),  # no fleet: its columns NULL
        **base,
        "policy": best["policy"],
        "reached": False,
        "token_hit_rate": best["token_hit_rate"],
        "method": f"none of {len(rows)} simulated configurations fits its GPUs' HBM",
        "source_run_id": best["run_id"],
        "note": f"every simulated fleet holds more KV per replica than its GPUs' HBM (the "
        f"largest capacity, {max(r['capacity_blocks'] for r in rows):,} blocks): none is a "
        "fleet that can exist; simulate with `prefixscope fleet --deployment GPU[xTP]`",
    }
