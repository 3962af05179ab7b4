"""The simulator beside the engines, in words and tables: for the terminal (``summary_text``)
and the page (``validation_section``, from the ``latest_validation`` and
``latest_validation_disagreements`` views; ``templates/validation.html`` lays it out)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import duckdb

from prefixscope.analysis.trace.measure import FLEET
from prefixscope.dashboards.views import read_view
from prefixscope.terminal import More, clip

#: The causes of a disagreement, as the page and the terminal say them.
CAUSES = {
    "unseen": "engine had a block the log never showed before",
    "evicted": "simulated cache had evicted it",
    "last_token": "engine served the last block (vLLM recomputes it)",
    "beyond_prompt": "engine reported more than the prompt's blocks",
    "kept": "simulated cache still held it",
}


def capacity_sentence(fleet: dict[str, Any]) -> str:
    """The fleet's effective capacity and its range, in one sentence; none named when too few
    usable reports were there to fit one."""
    cap, bs = fleet["capacity_blocks"], fleet["block_size"]
    if cap is None:
        return (
            f"No effective capacity ({fleet['policy']}): too few usable reports "
            f"({fleet['compared']:,}) to fit one."
        )
    gib = "" if fleet["capacity_gib"] is None else (
        f", {fleet['capacity_gib']:,.2f} GiB of {fleet['model']} KV"
    )  # fmt: skip
    high = fleet["capacity_high_blocks"]
    span = (
        f"at least {fleet['capacity_low_blocks']:,} blocks"
        if high is None
        else f"{fleet['capacity_low_blocks']:,}–{high:,} blocks"
    )
    text = (
        f"Effective capacity ({fleet['policy']}, {fleet['method']}): {cap:,} blocks "
        f"({cap * bs:,} tokens{gib}); 95% range {span}"
    )
    if fleet["resamples"] == 0:
        text = text.replace("95% range", "best fit")
    if fleet["curve_capacity_blocks"] is not None:
        text += (
            f"; the simulated total meets the reported total at "
            f"{fleet['curve_capacity_blocks']:,} blocks"
        )
    return text + "."


def agreement_cells(row: dict[str, Any]) -> dict[str, Any]:
    """One agreement row as text."""
    share, mae, corr = row["exact_match_share"], row["mean_abs_error_tokens"], row["correlation"]
    beyond = row.get("beyond_prompt")  # None: written before reports were checked
    simulated, more = row["simulated_hit_tokens"], row["reported_more"]
    return {
        "fleet": row["tenant"] == FLEET,
        "tenant": "fleet" if row["tenant"] == FLEET else row["tenant"],
        "compared": f"{row['compared']:,} of {row['requests']:,}",
        "exact": "—" if share is None else f"{share:.1%}",
        "mae": "—" if mae is None else f"{mae:,.1f}",
        "correlation": "—" if corr is None else f"{corr:.4f}",
        "reported": f"{row['reported_hit_tokens']:,}",
        "simulated": "—" if simulated is None else f"{simulated:,}",
        "more_fewer": "—" if more is None else f"{more:,} / {row['reported_fewer']:,}",
        "beyond": "—" if beyond is None else f"{beyond:,}",
    }


def disagreement_cells(row: dict[str, Any]) -> dict[str, Any]:
    """One disagreeing request as text."""
    need = row["hit_capacity_blocks"]
    return {
        "rank": str(row["rank"]),
        "tenant": row["tenant"],
        "request": row.get("log_request_id") or row["request_id"],
        "reported": f"{row['reported_hit_tokens']:,}",
        "simulated": f"{row['simulated_hit_tokens']:,}",
        "error": f"{row['error_tokens']:+,}",
        "block": str(row["first_disagreeing_block"]),
        "hit_capacity": "—" if need is None else f"{need:,}",
        "cause": CAUSES.get(row["cause"], row["cause"]),
    }


def summary_text(
    agreement: Sequence[dict[str, Any]], disagreements: Sequence[dict], more: More | None = None
) -> str:
    """What ``prefixscope validate`` prints: the capacity, agreement per tenant (at most
    ``terminal.MAX_ROWS`` with ``more``), the requests that disagree most."""
    fleet = next(r for r in agreement if r["tenant"] == FLEET)
    lines = [
        f"compared {fleet['compared']:,} of {fleet['requests']:,} requests with the engines' "
        f"reported cached tokens ({fleet['requests'] - fleet['compared']:,} not compared: "
        f"{fleet.get('beyond_prompt') or 0:,} beyond their prompt, the rest carry no count); "
        f"blocks of {fleet['block_size']} tokens, engine blocks of "
        f"{fleet['engine_block_size']}, compared in units of {fleet['compare_unit_tokens']}",
        capacity_sentence(fleet),
    ]
    if fleet["note"]:
        lines.append(f"note: {fleet['note']}")
    lines.append(
        f"{'tenant':<14} {'compared':>17} {'exact':>7} {'MAE tok':>9} {'corr':>7} "
        f"{'reported':>12} {'simulated':>12} {'more/fewer':>13} {'beyond':>7}"
    )
    rows = []
    for row in agreement:
        c = agreement_cells(row)
        rows.append(
            f"{c['tenant'][:14]:<14} {c['compared']:>17} {c['exact']:>7} {c['mae']:>9} "
            f"{c['correlation']:>7} {c['reported']:>12} {c['simulated']:>12} "
            f"{c['more_fewer']:>13} {c['beyond']:>7}"
        )
    lines += clip(rows, more)
    if disagreements:
        lines.append("requests that disagree most (simulated − reported tokens):")
        lines.append(
            f"{'rank':>4} {'tenant':<12} {'request':<24} {'reported':>9} {'simulated':>9} "
            f"{'error':>8} {'block':>5} {'LRU needs':>9}  cause"
        )
        for row in disagreements:
            c = disagreement_cells(row)
            lines.append(
                f"{c['rank']:>4} {c['tenant'][:12]:<12} {c['request'][:24]:<24} "
                f"{c['reported']:>9} {c['simulated']:>9} {c['error']:>8} {c['block']:>5} "
                f"{c['hit_capacity']:>9}  {c['cause']}"
            )
    elif (
        fleet["reported_more"] is not None and fleet["reported_more"] + fleet["reported_fewer"] == 0
    ):
        lines.append("every compared request agrees")
    return "\n".join(lines)


def validation_section(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]] | None:
    """Per policy validated: the capacity sentence, the agreement and the disagreement rows;
    None before any validate run."""
    agreement = read_view(con, "latest_validation").to_dicts()
    if not agreement:
        return None
    disagreements = read_view(con, "latest_validation_disagreements").to_dicts()
    out = []
    for fleet in (r for r in agreement if r["tenant"] == FLEET):
        policy = fleet["policy"]
        out.append(
            {
                "sentence": capacity_sentence(fleet),
                "fitted": fleet["capacity_blocks"] is not None,
                "note": fleet["note"] or "",
                "agreement": [agreement_cells(r) for r in agreement if r["policy"] == policy],
                "disagreements": [
                    disagreement_cells(r) for r in disagreements if r["policy"] == policy
                ],
            }
        )
    return out
