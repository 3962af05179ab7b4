"""``prefixscope roofline``'s table: a miss of ``cached + new`` tokens against a hit of ``new``
after ``cached``, on one GPU of a replica of ``tp``, with the experts and weights a MoE reads;
under the roofline's time (a lower bound), the measured-kernel model's where it is given."""

from __future__ import annotations

import numpy as np

from prefixscope.analysis.cost.gpus import GpuSpec
from prefixscope.analysis.cost.measured import MeasuredModel
from prefixscope.analysis.cost.models import ModelShape
from prefixscope.analysis.cost.params import parameter_count
from prefixscope.analysis.cost.roofline import prefill_cost, tp_link_gbps


def format_roofline(
    shape: ModelShape,
    gpu: GpuSpec,
    cached: int,
    new: int,
    tp: int = 1,
    measured: MeasuredModel | None = None,
) -> str:
    miss = prefill_cost(shape, gpu, cached + new, 0, tp=tp)
    hit = prefill_cost(shape, gpu, new, cached, tp=tp)
    count = parameter_count(shape)
    active = f", {count.active / 1e9:,.2f} B active" if shape.moe else ""
    where = f"{gpu.name}x{tp}: per GPU" if tp > 1 else gpu.name
    lines = [
        f"{shape.name}: {count.total / 1e9:,.2f} B parameters{active}; {where}: "
        f"{gpu.peak_flops / 1e12:,.0f} TFLOP/s, {gpu.mem_bandwidth / 1e12:,.2f} TB/s"
        + (_tp_link(gpu) if tp > 1 else ""),
        f"{'':<28}{'miss':>16}{'hit':>16}{'miss/hit':>10}",
    ]

    def row(label: str, m: float, h: float, fmt: str = ",.4g") -> None:
        lines.append(f"{label:<28}{m:>16{fmt}}{h:>16{fmt}}{m / h if h else float('nan'):>10.2f}")

    lines.append(f"{'tokens (new / cached)':<28}{cached + new:>9,} / 0{new:>9,} / {cached:,}")
    if shape.moe:
        row("experts read per MoE layer", miss.experts_touched, hit.experts_touched, ",.1f")
    if miss.moe is not None and hit.moe is not None:
        if shape.dense_layers:
            row("linear FLOPs, dense layer", miss.linear.flops, hit.linear.flops)
        row("linear FLOPs, MoE layer", miss.moe.flops, hit.moe.flops)
    else:
        row("linear FLOPs per layer", miss.linear.flops, hit.linear.flops)
    row("attention FLOPs per layer", miss.attention.flops, hit.attention.flops)
    row("attention FLOPs, model", miss.attention_flops, hit.attention_flops)
    row("FLOPs, model", miss.flops, hit.flops)
    if shape.moe or shape.mla or tp > 1:
        row("weight bytes read", miss.weight_bytes, hit.weight_bytes)
        row("KV bytes read and written", miss.kv_bytes, hit.kv_bytes)
    row("bytes, model", miss.bytes, hit.bytes)
    if tp > 1:
        row("all-reduce time (ms)", miss.layers * miss.allreduce_s * 1e3,
            hit.layers * hit.allreduce_s * 1e3, ",.3f")  # fmt: skip
    row("roofline time (ms)", miss.seconds * 1e3, hit.seconds * 1e3, ",.3f")
    if measured is not None:  # the same miss and hit, one prefill alone in a step
        t = measured.prefill_seconds(np.array([cached + new, new], np.float64),
                                     np.array([0, cached], np.float64))  # fmt: skip
        row("measured time (ms)", float(t[0]) * 1e3, float(t[1]) * 1e3, ",.3f")
    return "\n".join(lines)


def _tp_link(gpu: GpuSpec) -> str:
    """The link the all-reduces take (``tp_link_gbps``): NVLink, else the host's PCIe."""
    if gpu.nvlink_gbps:
        return f", NVLink {gpu.nvlink_gbps:,.0f} GB/s"
    return f", all-reduce over PCIe {tp_link_gbps(gpu):,.1f} GB/s (no NVLink)"
