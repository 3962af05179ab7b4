"""What a hit is worth, for terminals and for the report page: the roofline of one shape, the
savings per tenant and the cost model they rest on."""

from __future__ import annotations

import html

import duckdb
import pyarrow as pa

from prefixscope import sql
from prefixscope.analysis.gpus import GpuSpec
from prefixscope.analysis.models import ModelShape
from prefixscope.analysis.roofline import parameter_count, prefill_cost
from prefixscope.warehouse import FLEET

DECODE_NOTE = (
    "Prefill only. Decode time is unchanged by the prefix cache: every generated token reads "
    "the whole KV cache whether its prefix was cached or computed, so the end-to-end gain is "
    "bounded by the prefill share of the GPU time."
)
NO_SAVINGS_NOTE = (
    "No savings computed yet. A hit rate alone does not say what the cache saves: a miss is a "
    "full prefill, whose attention work grows with the square of the prompt, while a hit "
    "computes only the new tokens. Run <code>prefixscope simulate --outcomes</code> then "
    "<code>prefixscope savings</code> (and <code>prefixscope replay</code> for a measured "
    "cost model)."
)


def format_roofline(shape: ModelShape, gpu: GpuSpec, cached: int, new: int) -> str:
    """A miss of ``cached + new`` tokens against a hit of ``new`` after ``cached``."""
    miss = prefill_cost(shape, gpu, cached + new, 0)
    hit = prefill_cost(shape, gpu, new, cached)
    lines = [
        f"{shape.name}: {parameter_count(shape) / 1e9:,.2f} B parameters; {gpu.name}: "
        f"{gpu.peak_flops / 1e12:,.0f} TFLOP/s, {gpu.mem_bandwidth / 1e12:,.2f} TB/s",
        f"{'':<28}{'miss':>16}{'hit':>16}{'miss/hit':>10}",
    ]

    def row(label: str, m: float, h: float, fmt: str = ",.4g") -> None:
        lines.append(f"{label:<28}{m:>16{fmt}}{h:>16{fmt}}{m / h if h else float('nan'):>10.2f}")

    lines.append(f"{'tokens (new / cached)':<28}{cached + new:>9,} / 0{new:>9,} / {cached:,}")
    row("linear FLOPs per layer", miss.linear.flops, hit.linear.flops)
    row("attention FLOPs per layer", miss.attention.flops, hit.attention.flops)
    row("attention FLOPs, model", miss.attention_flops, hit.attention_flops)
    row("FLOPs, model", miss.flops, hit.flops)
    row("bytes, model", miss.bytes, hit.bytes)
    row("roofline time (ms)", miss.seconds * 1e3, hit.seconds * 1e3, ",.3f")
    return "\n".join(lines)


def format_savings(table: pa.Table) -> str:
    rows = table.to_pylist()
    if not rows:
        return "no savings rows"
    r0 = rows[0]
    cap = "unbounded" if r0["capacity_blocks"] is None else f"{r0['capacity_blocks']:,}"
    lines = [
        f"{r0['policy']} {r0['isolation']} @ {cap} blocks; {r0['model']} on {r0['gpu']}, "
        f"{r0['cost_model']} cost model",
        f"{'tenant':<14}{'hit':>7}{'GPU-s no cache':>16}{'with cache':>12}{'saved/h':>10}"
        f"{'TTFT p50 no/with (s)':>24}{'p95 no/with (s)':>20}",
    ]
    for r in rows:
        tenant = "fleet" if r["tenant"] == FLEET else r["tenant"][:14]
        per_hour = r["gpu_seconds_saved_per_hour"]
        lines.append(
            f"{tenant:<14}{r['hit_tokens'] / r['input_tokens']:>7.1%}"
            f"{r['prefill_gpu_seconds_no_cache']:>16,.1f}"
            f"{r['prefill_gpu_seconds_with_cache']:>12,.1f}"
            f"{'—' if per_hour is None else f'{per_hour:,.1f}':>10}"
            f"{r['ttft_p50_no_cache_s']:>12.3f} / {r['ttft_p50_with_cache_s']:<9.3f}"
            f"{r['ttft_p95_no_cache_s']:>9.3f} / {r['ttft_p95_with_cache_s']:<8.3f}"
        )
    lines.append(DECODE_NOTE)
    return "\n".join(lines)


def savings_html(con: duckdb.DuckDBPyConnection) -> str:
    """The report's "What a hit is worth" section."""
    rows = con.sql(sql.load("marts/latest_savings")).pl().to_dicts()
    if not rows:
        return f"<p class='note'>{NO_SAVINGS_NOTE}</p>"
    r0 = rows[0]
    if r0["cost_model"] == "calibrated":
        err = r0["holdout_median_abs_pct_err"]
        p90 = r0["holdout_p90_abs_pct_err"]
        quality = "" if err is None else f"; held-out error: median {err:.1f}%, p90 {p90:.1f}%"
        model = (
            f"calibrated on {html.escape(str(r0['cost_model_device']))} (replay run "
            f"<code>{html.escape(str(r0['cost_model_run_id']))}</code>{quality})"
        )
    else:
        model = "the analytic roofline (every operation at its peak compute or bandwidth: a "
        model += "lower bound on the time, not a measurement)"
    cap = "unbounded" if r0["capacity_blocks"] is None else f"{r0['capacity_blocks']:,} blocks"
    intro = (
        f"<p id='cost-model'>Prefill cost of <b>{html.escape(r0['model'])}</b> on "
        f"<b>{html.escape(r0['gpu'])}</b>, cost model: <b>{html.escape(r0['cost_model'])}</b>, "
        f"{model}. Cache: {html.escape(r0['policy'])}, {html.escape(r0['isolation'])}, {cap}."
        " Time to first token is the request's prefill alone on an idle GPU.</p>"
    )
    head = (
        "<tr><th class='text'>tenant</th><th>requests</th><th>token hit rate</th>"
        "<th>prefill GPU-s, no cache</th><th>with cache</th><th>saved</th>"
        "<th>GPU-s saved per hour</th><th>TTFT p50, no cache / with</th>"
        "<th>TTFT p95, no cache / with</th></tr>"
    )
    body = []
    for r in rows:
        cls = " class='fleet'" if r["tenant"] == FLEET else ""
        tenant = "fleet" if r["tenant"] == FLEET else html.escape(r["tenant"])
        per_hour = r["gpu_seconds_saved_per_hour"]
        share = r["saved_share"]
        body.append(
            f"<tr{cls}><td class='text'>{tenant}</td><td>{r['requests']:,}</td>"
            f"<td>{r['hit_tokens'] / r['input_tokens']:.2%}</td>"
            f"<td>{r['prefill_gpu_seconds_no_cache']:,.1f}</td>"
            f"<td>{r['prefill_gpu_seconds_with_cache']:,.1f}</td>"
            f"<td>{'—' if share is None else f'{share:.1%}'}</td>"
            f"<td>{'—' if per_hour is None else f'{per_hour:,.1f}'}</td>"
            f"<td>{_ms(r['ttft_p50_no_cache_s'])} / {_ms(r['ttft_p50_with_cache_s'])}</td>"
            f"<td>{_ms(r['ttft_p95_no_cache_s'])} / {_ms(r['ttft_p95_with_cache_s'])}</td></tr>"
        )
    table = f"<table id='savings'>{head}{''.join(body)}</table>"
    return f"{intro}{table}<p class='note' id='decode-note'>{html.escape(DECODE_NOTE)}</p>"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f} ms"
