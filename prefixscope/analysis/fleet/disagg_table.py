"""``disagg_fleets``: a disaggregated fleet and the colocated fleet of the same GPUs, one row
each (schema in ``sql/schema/35_disagg_fleets.sql``, docs/schema.md)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from prefixscope.analysis.fleet.disagg import DisaggOutcome, Link
from prefixscope.analysis.fleet.run import FleetOutcome

DISAGG_FLEETS_SCHEMA = pa.schema(
    [
        ("layout", pa.string()),
        ("prefill_deployment", pa.string()),
        ("prefill_replicas", pa.int32()),
        ("decode_deployment", pa.string()),
        ("decode_replicas", pa.int32()),
        ("gpus", pa.int32()),
        ("router", pa.string()),
        ("engine", pa.string()),
        ("model", pa.string()),
        ("load_scale", pa.float64()),
        ("link", pa.string()),
        ("link_gbps", pa.float64()),
        ("requests", pa.int64()),
        ("refused", pa.int64()),
        ("token_hit_rate", pa.float64()),
        ("ttft_p50_s", pa.float64()),
        ("ttft_p95_s", pa.float64()),
        ("ttft_p99_s", pa.float64()),
        ("tpot_p50_s", pa.float64()),
        ("tpot_p95_s", pa.float64()),
        ("transfer_p95_s", pa.float64()),
        ("decode_wait_p95_s", pa.float64()),
        ("prefill_utilisation", pa.float64()),
        ("decode_utilisation", pa.float64()),
        ("cost_source", pa.string()),
    ]
)


@dataclass(frozen=True)
class Layout:
    """What a row describes beyond its outcome."""

    prefill_deployment: str
    prefill_replicas: int
    decode_deployment: str | None
    decode_replicas: int
    gpus: int
    router: str
    engine: str
    model: str
    load_scale: float
    cost_source: str


def _pct(values: np.ndarray, q: float) -> float | None:
    """numpy's linear percentile of the finite values; None when there are none."""
    finite = values[np.isfinite(values)]
    return float(np.percentile(finite, q)) if len(finite) else None


def _hit_rate(outcome: FleetOutcome, input_tokens: np.ndarray) -> float:
    total = float(np.sum(input_tokens))
    return float(outcome.hit_tokens.sum()) / total if total else 0.0


def colocated_tpot(outcome: FleetOutcome, output_tokens: np.ndarray) -> np.ndarray:
    """Per request ``(done − first token) / (output − 1)``; NaN below two output tokens."""
    outputs = np.asarray(output_tokens, np.int64)
    many = outputs >= 2
    tpot = np.full(len(outputs), np.nan)
    first = outcome.arrival + outcome.ttft
    tpot[many] = (outcome.done_at[many] - first[many]) / (outputs[many] - 1)
    return tpot


def disagg_row(
    layout: Layout, outcome: DisaggOutcome, link: Link, input_tokens: np.ndarray
) -> dict:
    served = ~outcome.decoded.refused
    prefill_busy, decode_busy = outcome.utilisation()
    return {
        "layout": "disaggregated",
        **_layout_columns(layout),
        "link": link.name,
        "link_gbps": None if not np.isfinite(link.gbps) else link.gbps,
        "requests": len(outcome.ttft),
        "refused": int((~served).sum()),
        "token_hit_rate": _hit_rate(outcome.prefill, input_tokens),
        "ttft_p50_s": _pct(outcome.ttft[served], 50),
        "ttft_p95_s": _pct(outcome.ttft[served], 95),
        "ttft_p99_s": _pct(outcome.ttft[served], 99),
        "tpot_p50_s": _pct(outcome.tpot, 50),
        "tpot_p95_s": _pct(outcome.tpot, 95),
        "transfer_p95_s": _pct(outcome.transfer_s[served], 95),
        "decode_wait_p95_s": _pct(outcome.decode_wait_s[served], 95),
        "prefill_utilisation": prefill_busy,
        "decode_utilisation": decode_busy,
    }


def colocated_row(
    layout: Layout, outcome: FleetOutcome, input_tokens: np.ndarray, output_tokens: np.ndarray
) -> dict:
    tpot = colocated_tpot(outcome, output_tokens)
    span = float(outcome.done_at.max() - outcome.arrival.min()) if len(outcome.ttft) else 0.0
    return {
        "layout": "colocated",
        **_layout_columns(layout),
        "link": None,
        "link_gbps": None,
        "requests": len(outcome.ttft),
        "refused": 0,
        "token_hit_rate": _hit_rate(outcome, input_tokens),
        "ttft_p50_s": _pct(outcome.ttft, 50),
        "ttft_p95_s": _pct(outcome.ttft, 95),
        "ttft_p99_s": _pct(outcome.ttft, 99),
        "tpot_p50_s": _pct(tpot, 50),
        "tpot_p95_s": _pct(tpot, 95),
        "transfer_p95_s": None,
        "decode_wait_p95_s": None,
        "prefill_utilisation": float(outcome.busy.mean() / span) if span > 0 else 0.0,
        "decode_utilisation": None,
    }


def _layout_columns(layout: Layout) -> dict:
    return {
        "prefill_deployment": layout.prefill_deployment,
        "prefill_replicas": layout.prefill_replicas,
        "decode_deployment": layout.decode_deployment,
        "decode_replicas": layout.decode_replicas,
        "gpus": layout.gpus,
        "router": layout.router,
        "engine": layout.engine,
        "model": layout.model,
        "load_scale": layout.load_scale,
        "cost_source": layout.cost_source,
    }


def table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=DISAGG_FLEETS_SCHEMA)
