"""What a hit is worth, for terminals and for the report page: the savings per tenant and the
cost model they rest on (one shape's roofline is ``analysis/cost/rooflinetable.py``). The page
reads the ``latest_savings`` view; ``templates/savings.html`` lays it out."""

from __future__ import annotations

from typing import Any

import duckdb
import pyarrow as pa

from prefixscope.analysis.cost.shipped import PREFIX
from prefixscope.analysis.trace.measure import FLEET
from prefixscope.dashboards.views import read_view
from prefixscope.terminal import More, clip

DECODE_NOTE = (
    "Prefill only. Decode time is unchanged by the prefix cache: every generated token reads "
    "the whole KV cache whether its prefix was cached or computed, so the end-to-end gain is "
    "bounded by the prefill share of the GPU time."
)


def format_savings(table: pa.Table, more: More | None = None) -> str:
    rows = table.to_pylist()
    if not rows:
        return "no savings rows"
    r0 = rows[0]
    cap = "unbounded" if r0["capacity_blocks"] is None else f"{r0['capacity_blocks']:,}"
    lines = [
        f"{r0['policy']} {r0['isolation']} @ {cap} blocks; {r0['model']} on {priced_on(r0)}, "
        f"{r0['cost_model']} cost model",
        units_line(r0),
        f"{'tenant':<14}{'hit':>7}{'GPU-s no cache':>16}{'with cache':>12}{'saved/h':>10}"
        f"{'$ saved/h':>10}{'TTFT p50 no/with (s)':>24}{'p95 no/with (s)':>20}",
    ]
    body = []
    for r in rows:
        tenant = "fleet" if r["tenant"] == FLEET else r["tenant"][:14]
        per_hour = r["gpu_seconds_saved_per_hour"]
        body.append(
            f"{tenant:<14}{r['hit_tokens'] / r['input_tokens']:>7.1%}"
            f"{r['prefill_gpu_seconds_no_cache']:>16,.1f}"
            f"{r['prefill_gpu_seconds_with_cache']:>12,.1f}"
            f"{'—' if per_hour is None else f'{per_hour:,.1f}':>10}"
            f"{dollars(r.get('usd_saved_per_hour')):>10}"
            f"{r['ttft_p50_no_cache_s']:>12.3f} / {r['ttft_p50_with_cache_s']:<9.3f}"
            f"{r['ttft_p95_no_cache_s']:>9.3f} / {r['ttft_p95_with_cache_s']:<8.3f}"
        )
    lines += clip(body, more)
    lines.append(DECODE_NOTE)
    return "\n".join(lines)


def units_line(r: dict[str, Any]) -> str:
    """What a row's GPU-seconds and dollars count: every GPU a prefill runs on, at one GPU's
    price an hour."""
    gpus = r.get("gpus") or 1
    price = r.get("gpu_hour")
    each = "" if price is None else f", at ${price:,.2f} a GPU-hour"
    return f"GPU-s: each prefill's time × {gpus} GPU{'s' if gpus > 1 else ''}{each}"


def dollars(x: float | None) -> str:
    """An amount of dollars as the summaries print it; — where none was priced."""
    if x is None:
        return "—"
    return f"-${-x:,.2f}" if x < 0 else f"${x:,.2f}"


def priced_on(r: dict[str, Any]) -> str:
    """What a savings row was priced on: its deployment and the KV pool that bounds its
    capacity (``h100x1, a 885-block KV pool``), else its GPU (a warehouse written before the
    column, a GPU without an HBM figure, the CPU)."""
    if not r.get("deployment"):
        return str(r["gpu"])
    return f"{r['deployment']} ({r['kv_pool_blocks']:,}-block KV pool)"


def is_calibrated(cost_model: str) -> bool:
    """Whether rows priced by ``cost_model`` rest on this warehouse's replay fit
    (``calibrated``) or a shipped one (``shipped:FILE``): not the roofline, nor the measured
    kernels (``measured``, said in words of their own)."""
    return cost_model not in ("roofline", "measured")


def savings_section(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """What ``templates/savings.html`` shows: one entry per priced configuration of
    ``latest_savings`` (newest first), each with its cost model and its rows, the fleet first.
    Empty before any savings run."""
    configs: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in read_view(con, "latest_savings").iter_rows(named=True):
        key = tuple(r[k] for k in CONFIGURATION)
        configs.setdefault(key, []).append(r)
    return [_configuration(i, rows) for i, rows in enumerate(configs.values())]


#: The columns of ``latest_savings`` that name one priced configuration.
CONFIGURATION = (
    "policy",
    "isolation",
    "capacity_blocks",
    "model",
    "gpu",
    "deployment",
    "cost_model",
)


def _configuration(i: int, rows: list[dict[str, Any]]) -> dict[str, Any]:
    r0 = rows[0]
    calibrated = is_calibrated(r0["cost_model"])
    quality = ""
    if calibrated and r0["holdout_median_abs_pct_err"] is not None:
        quality = (
            f"; held-out error: median {r0['holdout_median_abs_pct_err']:.1f}%, "
            f"p90 {r0['holdout_p90_abs_pct_err']:.1f}%"
        )
    return {
        "id_suffix": "" if i == 0 else f"-{i + 1}",  # element ids stay unique on the page
        "model": r0["model"],
        "gpu": priced_on(r0),
        "cost_model": r0["cost_model"],
        "calibrated": calibrated,
        "shipped": r0["cost_model"].startswith(PREFIX),
        "measured": r0["cost_model"] == "measured",
        "device": str(r0["cost_model_device"]),
        "cost_model_run_id": str(r0["cost_model_run_id"]),
        "quality": quality,
        "policy": r0["policy"],
        "isolation": r0["isolation"],
        "cache": "unbounded"
        if r0["capacity_blocks"] is None
        else f"{r0['capacity_blocks']:,} blocks",
        "rows": [_row(r) for r in rows],
    }


def _row(r: dict[str, Any]) -> dict[str, Any]:
    per_hour = r["gpu_seconds_saved_per_hour"]
    share = r["saved_share"]
    return {
        "fleet": r["tenant"] == FLEET,
        "tenant": "fleet" if r["tenant"] == FLEET else r["tenant"],
        "requests": f"{r['requests']:,}",
        "token_hit_rate": f"{r['hit_tokens'] / r['input_tokens']:.2%}",
        "no_cache": f"{r['prefill_gpu_seconds_no_cache']:,.1f}",
        "with_cache": f"{r['prefill_gpu_seconds_with_cache']:,.1f}",
        "saved": "—" if share is None else f"{share:.1%}",
        "per_hour": "—" if per_hour is None else f"{per_hour:,.1f}",
        "ttft_p50": f"{_ms(r['ttft_p50_no_cache_s'])} / {_ms(r['ttft_p50_with_cache_s'])}",
        "ttft_p95": f"{_ms(r['ttft_p95_no_cache_s'])} / {_ms(r['ttft_p95_with_cache_s'])}",
    }


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f} ms"
