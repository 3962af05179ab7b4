"""The SLO planner's answer in words (``plan_slo_answers`` rows), for the terminal, the demo's
summary and the page's opening: per load scale, the cheapest fleet in GPUs and dollars, what
it would take without the prefix cache, and a short table of the fleets searched."""

from __future__ import annotations

from collections.abc import Sequence

import duckdb

from prefixscope.analysis.plan.slo_tables import HOURS_PER_MONTH

#: Rows of the fleets table the terminal prints; the rest are counted, with their query.
TABLE_ROWS = 20
ALL_FLEETS_SQL = "SELECT * FROM latest_plan_slo_fleets"


def fleet_words(row: dict, model: str, kv_gib: float | None) -> str:
    """``3 × H100 (llama-3-8b, 54.0 GiB of KV each)``; a replica of TP GPUs as ``32 × H200
    (4 replicas of 8; deepseek-v3, 47.3 GiB of KV on each GPU)``; then routing and tiers."""
    gpus, n = row["gpus"], row["replicas"]
    tp = gpus // n
    gpu = row["deployment"][: -len(f"x{tp}")].upper()
    kv = (
        ""
        if kv_gib is None
        else f", {kv_gib:,.1f} GiB of KV {'each' if tp == 1 else 'on each GPU'}"
    )
    head = f"{n} × {gpu} ({model}{kv})" if tp == 1 else (
        f"{gpus} × {gpu} ({n} replicas of {tp}; {model}{kv})"
    )  # fmt: skip
    tiers = []
    if row["dram_gib_per_replica"]:
        tiers.append(f"{row['dram_gib_per_replica']:,.0f} GiB of host DRAM per replica")
    if row["store_gib"] is not None:
        tiers.append(f"a shared store of {row['store_gib']:,.0f} GiB")
    extra = f", {' and '.join(tiers)}" if tiers else ""
    return f"{head}, {row['router']} routing{extra}"


def _hours(seconds: float) -> str:
    """``36 h``, ``90 min``, ``45 s``: a time after the trace's first arrival, or a length."""
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:,.0f} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:,.0f} min"
    return f"{seconds:,.0f} s"


def window_words(row: dict) -> str:
    """Where the SLO was held (``plan_slo_answers``' window columns): `` It holds in every one of
    the trace's 169 windows of 1 h (searched on 1, the busiest first); the window from 129 h to
    130 h after the first request binds.``; nothing for a trace searched whole."""
    windows = row.get("windows")
    if not row.get("window_s") or not windows or windows < 2:
        return ""
    length = _hours(row["window_s"])
    start, end = row.get("bound_window_start_s"), row.get("bound_window_end_s")
    where = (
        ""
        if start is None or end is None
        else f"; the window from {_hours(start)} to {_hours(end)} after the first request binds"
    )
    if not row["met"]:
        return (
            f" Searched on {row['windows_searched']:,} of the trace's {windows:,} windows of "
            f"{length} (the busiest first){where}."
        )
    return (
        f" It holds in every one of the trace's {windows:,} windows of {length} (searched on "
        f"{row['windows_searched']:,}, the busiest first){where}."
    )


def _load(scale: float) -> str:
    return "At the logged load" if scale == 1 else f"At {scale:g}× the logged load"


#: Said once under the answers of a search on the ``ideal`` engine (docs/plan.md).
IDEAL_CAVEAT = (
    "Priced on the ideal engine, whose running requests hold their KV beside a full prefix "
    "cache: a server's KV pool holds both, and `plan --slo` on its default engine, `vllm`, "
    "or on `sglang` prices fleets that can exist (docs/plan.md)."
)


def sentences(
    answers: Sequence[dict], model: str, kv: dict[str, float], engine: str | None = None
) -> list[str]:
    """One or two sentences per load scale (caching on and off); searched on ``engine``, said
    where it is ``ideal``."""
    out = []
    for scale in dict.fromkeys(a["load_scale"] for a in answers):
        on = next((a for a in answers if a["load_scale"] == scale and a["prefix_caching"]), None)
        off = next(
            (a for a in answers if a["load_scale"] == scale and not a["prefix_caching"]), None
        )
        if on is None:
            continue
        slo = on["slo"]
        if not on["met"]:
            closest = (
                f" the closest, {fleet_words(on, model, kv.get(on['deployment']))}, "
                f"${on['usd_per_hour']:,.2f} an hour, misses {on['binding']} (TTFT p95 "
                f"{on['ttft_p95_s']:,.2f} s)"
                if on["deployment"]
                else ""
            )
            out.append(
                f"{_load(scale)}, no fleet searched meets {slo} ({on['fleets_searched']:,} "
                f"fleets simulated):{closest}: search more deployments or loosen the SLO."
                + window_words(on)
            )
            continue
        text = (
            f"{_load(scale)}, the cheapest fleet that meets {slo}: "
            f"{fleet_words(on, model, kv.get(on['deployment']))}, ${on['usd_per_hour']:,.2f} an "
            f"hour (TTFT p95 {on['ttft_p95_s']:,.2f} s; {on['binding']} binds)"
        )
        if off is not None and off["met"]:
            saved = on["usd_saved_per_month"] or 0.0
            verb = "saves" if saved >= 0 else "costs"
            text += (
                f"; without the prefix cache {off['gpus']} × "
                f"{off['deployment'].rsplit('x', 1)[0].upper()} "
                f"({off['replicas']} × {off['deployment']}), ${off['usd_per_hour']:,.2f} an hour: "
            )
            text += (
                "the cache saves nothing at this SLO."
                if abs(saved) < 0.005
                else f"the cache {verb} ${abs(saved):,.0f} a month ({HOURS_PER_MONTH:g} h) and "
                f"{on['gpus_saved']:,} GPUs."
            )
        elif off is not None:
            text += "; without the prefix cache no fleet searched meets it."
        else:
            text += "."
        out.append(text + window_words(on) + range_words(on))
    if out and engine == "ideal":
        out.append(IDEAL_CAVEAT)
    return out


def range_words(row: dict) -> str:
    """What priced the steps, and where it is the measured model, how the answer moves within
    its measured error (``plan/uncertainty.py``)."""
    source, pct = row.get("cost_model"), row.get("slower_pct")
    if source == "measured" and pct is not None:
        gpu = (row.get("deployment") or "").rsplit("x", 1)[0].upper()
        slower = (
            f"{row['gpus_if_slower']} × {gpu} (${row['usd_per_hour_if_slower']:,.2f} an hour)"
            if row.get("gpus_if_slower") is not None
            else "no fleet searched"
        )
        return (
            f" Steps priced by measured vLLM kernels; {slower} if steps run {pct:.0f}% slower "
            "than predicted (the model's p90 error against real serving runs)."
        )
    if source == "roofline":
        return " Steps priced by the roofline, a lower bound: real GPUs run slower."
    if source:
        return f" Steps priced by the {source} cost model."
    return ""


def fleets_table(fleets: Sequence[dict], limit: int = TABLE_ROWS) -> str:
    """The cheapest fleets that meet the SLO, then the rest, at most ``limit`` rows; the count
    of the others and the query that shows them all."""
    ordered = sorted(
        fleets,
        key=lambda f: (f["load_scale"], not f["prefix_caching"], not f["meets_slo"],
                       f["usd_per_hour"], f["ttft_p95_s"]),
    )  # fmt: skip
    head = (
        f"{'load':>4} {'cache':<5} {'deployment':<10} {'repl':>4} {'GPUs':>4} {'router':<12} "
        f"{'DRAM GiB':>8} {'store GiB':>9} {'hit rate':>8} {'TTFT p95':>8} {'p99':>7} "
        f"{'TPOT p95':>8} {'$/hour':>9} meets"
    )
    rows = [head]
    for f in ordered[:limit]:
        store = "-" if f["store_gib"] is None else f"{f['store_gib']:,.0f}"
        # a fleet stopped once it missed: its latencies are lower bounds
        at_least = ">" if f.get("stopped_early") else " "
        rows.append(
            f"{f['load_scale']:>4g} {'on' if f['prefix_caching'] else 'off':<5} "
            f"{f['deployment']:<10} {f['replicas']:>4} {f['gpus']:>4} {f['router']:<12} "
            f"{f['dram_gib_per_replica']:>8,.0f} {store:>9} {f['token_hit_rate']:>8.4f} "
            f"{at_least}{f['ttft_p95_s']:>7.2f} {at_least}{f['ttft_p99_s']:>6.2f} "
            f"{at_least}{f['tpot_p95_s']:>7.4f} "
            f"{f['usd_per_hour']:>9,.2f} {'yes' if f['meets_slo'] else 'no'}"
        )
    rest = len(ordered) - limit
    if rest > 0:
        rows.append(f"(and {rest:,} more fleets searched: {ALL_FLEETS_SQL})")
    if any(f.get("stopped_early") for f in ordered[:limit]):
        rows.append("(>: the fleet was stopped once it missed the SLO for sure; at least that)")
    return "\n".join(rows)


def short(answers: Sequence[dict], model: str, engine: str | None = None) -> str | None:
    """The first load scale's answer in two terminal lines (the demo's summary, which names the
    model on its other lines): ``24 × H200 (3 × h200x8, a store of 2,048 GiB) meet ttft-p95=5 at
    $88.40 an hour (32 if 24% slower); without the prefix cache 40 × H200: the cache saves
    $37,669 a month``; the range where measured kernels priced the steps; on the ``ideal``
    engine "at least" before the count, a lower bound (:data:`IDEAL_CAVEAT`), in two lines
    still, so the summary keeps its optional lines."""
    on = next((a for a in answers if a["prefix_caching"]), None)
    if on is None:
        return None
    off = next((a for a in answers if not a["prefix_caching"]
                and a["load_scale"] == on["load_scale"]), None)  # fmt: skip
    if not on["met"]:
        return f"no fleet of those searched meets {on['slo']} ({on['fleets_searched']:,} simulated)"
    gpu = on["deployment"].rsplit("x", 1)[0].upper()
    tiers = []
    if on["dram_gib_per_replica"]:
        tiers.append(f"{on['dram_gib_per_replica']:,.0f} GiB DRAM each")
    if on["store_gib"] is not None:
        tiers.append(f"a store of {on['store_gib']:,.0f} GiB")
    what = ", ".join([f"{on['replicas']} × {on['deployment']}", *tiers])
    # the ideal engine's count is a lower bound (IDEAL_CAVEAT); the page says why
    least = "at least " if engine == "ideal" else ""
    text = f"{least}{on['gpus']} × {gpu} ({what}) meet {on['slo']}"
    text += f" at ${on['usd_per_hour']:,.2f} an hour"
    if on.get("cost_model") == "measured" and on.get("slower_pct") is not None:
        more = on.get("gpus_if_slower")
        text += (
            f" ({more} if {on['slower_pct']:.0f}% slower)"
            if more is not None
            else f" (none searched if {on['slower_pct']:.0f}% slower)"
        )
    elif on.get("cost_model") == "roofline":
        text += " (roofline steps: a lower bound)"
    if off is None:
        return text
    if not off["met"]:
        return f"{text}; without the prefix cache no fleet searched meets it"
    saved = on["usd_saved_per_month"] or 0.0
    if abs(saved) < 0.005:
        return f"{text}, as without the prefix cache: it saves nothing at this SLO"
    return (
        f"{text}; without the prefix cache {off['gpus']} × "
        f"{off['deployment'].rsplit('x', 1)[0].upper()}: the cache "
        f"{'saves' if saved >= 0 else 'costs'} ${abs(saved):,.0f} a month"
    )


def from_warehouse(con: duckdb.DuckDBPyConnection, brief: bool = False) -> list[str]:
    """The answer sentences of the newest SLO search (none: no search); ``brief``: the first
    load's in two lines (:func:`short`)."""
    try:
        answers = con.sql("SELECT * FROM latest_plan_slo_answers").to_arrow_table().to_pylist()
    except duckdb.CatalogException:  # a warehouse written before the SLO planner, read-only
        return []
    if not answers:
        return []
    kv = dict(
        con.execute(
            "SELECT deployment, any_value(kv_pool_gib_per_gpu) FROM latest_plan_slo_fleets "
            "GROUP BY deployment"
        ).fetchall()
    )
    engines = con.execute("SELECT DISTINCT engine FROM latest_plan_slo_fleets").fetchall()
    # every row fetched: a result left open would refuse the connection's next query
    model = con.execute(
        "SELECT r.parameters ->> 'model' FROM runs r WHERE r.run_id = ?",
        [_run_of(con)],
    ).fetchall()
    name = (model[0] if model else [None])[0] or "the model"
    engine = engines[0][0] if len(engines) == 1 else None
    if brief:
        line = short(answers, name, engine)
        return [] if line is None else [line + "."]
    return sentences(answers, name, kv, engine)


def _run_of(con: duckdb.DuckDBPyConnection) -> str | None:
    found = con.execute("SELECT any_value(run_id) FROM latest_plan_slo_answers").fetchall()
    return found[0][0] if found else None


def searched(outcomes: Sequence) -> str:  # type: ignore[type-arg]
    """What was searched, per load scale and caching on/off (``search.Outcome``)."""
    parts = []
    for o in outcomes:
        g = o.group
        skipped = o.dominated_unsimulated + o.dominated_later
        parts.append(
            f"×{g.load_scale:g} caching {'on' if g.prefix_caching else 'off'}: "
            f"{len(o.fleets):,} fleets simulated over {len(g.series):,} series "
            f"(deployment × router{' × DRAM tier × store' if g.prefix_caching else ''}), "
            f"{skipped:,} series dropped as dominated ({o.dominated_unsimulated:,} before any "
            f"simulation), {o.never_met:,} that miss at every count"
            + (f", {o.non_monotone:,} not monotone in replicas" if o.non_monotone else "")
        )
    return "Searched: " + "; ".join(parts) + "."


def disagg_lines(rows: Sequence[dict]) -> list[str]:
    """The disaggregated answers (``plan_slo_disagg``), a sentence per load scale: the split,
    its GPUs beside the colocated answer's, and which layout needs fewer."""
    out = []
    for r in rows:
        over = (
            "at once"
            if r["link_gbps"] is None
            else f"over {r['link']}, {r['link_gbps']:g} GB/s per GPU"
        )
        where = (
            f"{_load(r['load_scale'])}, split into prefill and decode pools (the KV moving "
            f"{over}; held in the busiest window)"
        )
        if not r["met"]:
            out.append(
                f"{where}: no split of {r['deployment']} up to {r['max_replicas_searched']} "
                f"replicas meets {r['slo']} ({r['fleets_searched']:,} simulated)."
            )
            continue
        gpu = r["deployment"].rsplit("x", 1)[0].upper()
        text = (
            f"{where}: {r['gpus']} × {gpu} ({r['prefill_replicas']} × {r['deployment']} "
            f"prefill, {r['decode_replicas']} × {r['deployment']} decode) meet {r['slo']} at "
            f"${r['usd_per_hour']:,.2f} an hour"
        )
        fewer = r["gpus_fewer_than_colocated"]
        if r["colocated_gpus"] is None:
            text += "; no colocated fleet searched meets it"
        elif fewer > 0:
            text += f": {fewer} GPUs fewer than colocated ({r['colocated_gpus']})"
        elif fewer < 0:
            text += f": colocated needs {-fewer} GPUs fewer ({r['colocated_gpus']})"
        else:
            text += f", as many GPUs as colocated ({r['colocated_gpus']})"
        out.append(text + ".")
    return out


def disagg_short(r: dict) -> str:
    """The first load's split in a line or two (the demo's summary): ``40 × H200 as 3 prefill
    + 2 decode replicas of h200x8 meet ttft-p95=5 ($144.40 an hour): colocated needs 16 GPUs
    fewer``."""
    if not r["met"]:
        return f"no split of {r['deployment']} into prefill and decode pools meets {r['slo']}"
    gpu = r["deployment"].rsplit("x", 1)[0].upper()
    text = (
        f"{r['gpus']} × {gpu} as {r['prefill_replicas']} prefill + {r['decode_replicas']} decode "
        f"replicas of {r['deployment']} meet {r['slo']} (${r['usd_per_hour']:,.2f} an hour)"
    )
    fewer = r["gpus_fewer_than_colocated"]
    if fewer is None:
        return text
    if fewer == 0:
        return text + ", as many GPUs as colocated"
    who = "the split needs" if fewer > 0 else "colocated needs"
    return f"{text}: {who} {abs(fewer)} GPUs fewer"


def disagg_from_warehouse(con: duckdb.DuckDBPyConnection, brief: bool = False) -> list[str]:
    """:func:`disagg_lines` of the newest search that split its fleets (none: no such run);
    ``brief``: the first load's in a line (:func:`disagg_short`)."""
    try:
        rows = con.sql("SELECT * FROM latest_plan_slo_disagg").to_arrow_table().to_pylist()
    except duckdb.CatalogException:  # a warehouse written before the split search, read-only
        return []
    if brief:
        return [disagg_short(rows[0]) + "."] if rows else []
    return disagg_lines(rows)


def per_window_lines(answers: Sequence[dict], windows: Sequence[dict]) -> list[str]:
    """Each window sized alone (``plan_slo_windows``) beside the static answer, per load scale
    and caching: the GPUs a window needs (fewest, median, most) and the GPU-hours of both
    (``plan_slo_answers``' ``gpu_hours_*``); nothing when the windows were not sized."""
    if not windows:
        return []
    lines = [
        "Window by window, each sized alone as a perfect autoscaler would run it (resizing free: "
        "a lower bound):"
    ]
    for a in answers:
        key = (a["load_scale"], a["prefix_caching"])
        rows = [w for w in windows if (w["load_scale"], w["prefix_caching"]) == key]
        if not rows:
            continue
        gpus = sorted(w["gpus"] for w in rows if w["met"])
        cache = "cache on" if a["prefix_caching"] else "cache off"
        head = f"  {_load(a['load_scale']).lower()}, {cache}: "
        if gpus:
            head += (
                f"{gpus[0]:,} to {gpus[-1]:,} GPUs (median {gpus[len(gpus) // 2]:,}) over "
                f"{len(rows):,} windows"
            )
        else:
            head += f"no fleet meets in any of its {len(rows):,} windows alone"
        unmet = a.get("windows_unmet_alone") or 0
        scaled, static = a.get("gpu_hours_per_window"), a.get("gpu_hours_static")
        if unmet:
            counted = (
                "counted at the static answer" if static else "no static answer to count them at"
            )
            head += f", {unmet:,} of them met by none ({counted})"
        if scaled is not None and static:
            head += (
                f"; {scaled:,.1f} GPU-hours against {static:,.1f} static "
                f"({(scaled - static) / static:+.0%})"
            )
        elif scaled is not None:
            head += f"; {scaled:,.1f} GPU-hours (no static answer)"
        lines.append(head)
    return lines
