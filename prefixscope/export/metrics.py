"""The warehouse's latest figures as OpenMetrics text, for Prometheus through node_exporter's
textfile collector (docs/export.md#metrics).

Every family is a gauge (a figure of the latest run, not a count that only grows: no
``_total``), named ``prefixscope_...`` with its unit last (``_ratio``, ``_seconds``,
``_bytes``, ``_blocks``). Each comes from one view through one query of
``prefixscope/sql/metrics/``: the view's key as labels, one sample per row, a NULL value left
out (never written as NaN). The text is made by ``prometheus_client``'s OpenMetrics exposition,
which escapes label values by the standard; it holds only gauges, so the classic Prometheus
text parser (node_exporter's) reads it too. Written atomically: a collector never reads half a
file.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.openmetrics.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from prefixscope import sql, warehouse
from prefixscope.export.atomic import check_writable, write_text


@dataclass(frozen=True)
class Gauge:
    """One family: ``name`` (its unit last, and that unit in ``unit``), read from ``column``."""

    name: str
    column: str
    help: str
    unit: str = ""


@dataclass(frozen=True)
class Source:
    """The families one query (``sql/metrics/<query>.sql``) gives, labelled by ``labels``;
    read only when the warehouse has ``view`` (one another piece of prefixscope adds)."""

    query: str
    labels: tuple[str, ...]
    gauges: tuple[Gauge, ...]
    view: str | None = None


_HIT_LABELS = ("tenant", "policy", "policy_options", "isolation", "capacity_blocks",
               "block_size", "window")  # fmt: skip

SOURCES: tuple[Source, ...] = (
    Source("hit_rates", _HIT_LABELS, (
        Gauge("prefixscope_token_hit_ratio", "token_hit_rate",
              "Share of prompt tokens served from the simulated prefix cache", "ratio"),
        Gauge("prefixscope_request_hit_ratio", "request_hit_rate",
              "Share of requests with at least one block served from the cache", "ratio"),
        Gauge("prefixscope_token_hit_ceiling_ratio", "ceiling_token_hit_rate",
              "Token hit ratio of an unbounded cache on the same requests: the most any "
              "capacity reaches", "ratio"),
    )),
    Source("validation", ("tenant", "policy"), (
        Gauge("prefixscope_effective_capacity_blocks", "capacity_blocks",
              "Cache capacity that explains the engines' reported cached tokens (validate)",
              "blocks"),
        Gauge("prefixscope_effective_capacity_low_blocks", "capacity_low_blocks",
              "Low end of the effective capacity's bootstrap range", "blocks"),
        Gauge("prefixscope_effective_capacity_high_blocks", "capacity_high_blocks",
              "High end of the effective capacity's bootstrap range", "blocks"),
        Gauge("prefixscope_effective_capacity_bytes", "capacity_bytes",
              "The effective capacity as KV cache bytes of the model validated", "bytes"),
        Gauge("prefixscope_reported_token_hit_ratio", "reported_token_hit_rate",
              "Share of prompt tokens the engines reported as cached", "ratio"),
    )),
    Source("savings", ("tenant", "policy", "isolation", "capacity_blocks", "model", "gpu",
                       "cost_model", "deployment"), (
        Gauge("prefixscope_gpu_seconds_saved_per_hour", "gpu_seconds_saved_per_hour",
              "Prefill GPU-seconds (every GPU of the deployment) the cache saves per hour of "
              "traffic"),
        Gauge("prefixscope_usd_saved_per_hour", "usd_saved_per_hour",
              "US dollars of GPU time the cache saves per hour of traffic"),
        Gauge("prefixscope_prefill_saved_ratio", "saved_share",
              "Share of prefill GPU time the cache saves", "ratio"),
        Gauge("prefixscope_ttft_p95_no_cache_seconds", "ttft_p95_no_cache_s",
              "95th percentile time to first token without the cache", "seconds"),
        Gauge("prefixscope_ttft_p95_with_cache_seconds", "ttft_p95_with_cache_s",
              "95th percentile time to first token with the cache", "seconds"),
    )),
    Source("plan", ("kind", "tenant", "policy", "window"), (
        Gauge("prefixscope_plan_capacity_blocks", "capacity_blocks",
              "The planner's answer: the smallest capacity that reaches the target", "blocks"),
        Gauge("prefixscope_plan_capacity_bytes", "capacity_bytes",
              "The planner's capacity as KV cache bytes", "bytes"),
        Gauge("prefixscope_plan_token_hit_ratio", "token_hit_rate",
              "Token hit ratio at the planner's answer", "ratio"),
        Gauge("prefixscope_plan_target_token_hit_ratio", "target_token_hit_rate",
              "The token hit ratio the planner was asked to reach", "ratio"),
        Gauge("prefixscope_plan_reached", "reached",
              "1 when the planner's answer reaches the target, else 0"),
        Gauge("prefixscope_plan_replicas", "replicas", "Replicas of the planned fleet"),
        Gauge("prefixscope_plan_gpus", "gpus", "GPUs of the planned fleet"),
        Gauge("prefixscope_plan_cost_per_hour", "cost_per_hour",
              "Price of the planned fleet per hour, in the prices' currency"),
        Gauge("prefixscope_plan_ttft_p95_seconds", "ttft_p95_s",
              "95th percentile time to first token of the planned fleet", "seconds"),
    )),
    Source("plan_slo_answers", ("load_scale", "prefix_caching", "slo", "deployment", "router"), (
        Gauge("prefixscope_plan_slo_met", "met", "1 when the cheapest fleet found meets the SLO"),
        Gauge("prefixscope_plan_slo_replicas", "replicas", "Replicas of the SLO plan's fleet"),
        Gauge("prefixscope_plan_slo_gpus", "gpus", "GPUs of the SLO plan's fleet"),
        Gauge("prefixscope_plan_slo_usd_per_hour", "usd_per_hour",
              "Price of the SLO plan's fleet, US dollars per hour"),
        Gauge("prefixscope_plan_slo_ttft_p95_seconds", "ttft_p95_s",
              "95th percentile time to first token of the SLO plan's fleet", "seconds"),
        Gauge("prefixscope_plan_slo_gpus_saved", "gpus_saved",
              "GPUs the prefix cache saves against the answer without it"),
        Gauge("prefixscope_plan_slo_usd_saved_per_month", "usd_saved_per_month",
              "US dollars a month the prefix cache saves against the answer without it"),
    ), view="latest_plan_slo_answers"),
    Source("last_success", ("command",), (
        Gauge("prefixscope_last_success_timestamp_seconds", "finished",
              "When the command last succeeded on this warehouse, Unix time", "seconds"),
    )),
)  # fmt: skip


@dataclass(frozen=True)
class MetricsResult:
    out: Path
    families: int
    samples: int


def metrics_text(con: duckdb.DuckDBPyConnection) -> str:
    """The OpenMetrics text of every family the warehouse has figures for (ends in ``# EOF``)."""
    return render(list(collect(con)))


def render(families: list[Metric]) -> str:
    """``families`` in the OpenMetrics text format, by ``prometheus_client``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(families))
    return generate_latest(registry).decode("utf-8")


def write_metrics(wh: str | Path, out: str | Path) -> MetricsResult:
    """Read the views from a read-only connection, write the text to ``out`` atomically."""
    out = Path(out)
    check_writable(out)
    with warehouse.reading(wh) as con:
        families = list(collect(con))
    write_text(out, render(families))
    return MetricsResult(out, len(families), sum(len(f.samples) for f in families))


def collect(con: duckdb.DuckDBPyConnection) -> Iterator[Metric]:
    """Each family with at least one sample. A label set repeated (which the views' keys
    rule out) keeps its first row: a family may not name one series twice."""
    views = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views()").fetchall()}
    for source in SOURCES:
        if source.view is not None and source.view not in views:
            continue
        rows = con.sql(sql.load(f"metrics/{source.query}")).to_arrow_table().to_pylist()
        for gauge in source.gauges:
            family = GaugeMetricFamily(gauge.name, gauge.help, labels=source.labels,
                                       unit=gauge.unit)  # fmt: skip
            seen: set[tuple[str, ...]] = set()
            for row in rows:
                value = row[gauge.column]
                labels = tuple(str(row[k]) for k in source.labels)
                if value is None or not math.isfinite(float(value)) or labels in seen:
                    continue
                seen.add(labels)
                family.add_metric(list(labels), float(value))
            if family.samples:
                yield family


class _Fixed(Collector):
    """The families already read, for ``generate_latest``."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families
