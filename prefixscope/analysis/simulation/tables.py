"""The tables a simulation writes (``hit_rates``, ``hit_rate_timeseries``,
``request_outcomes``; docs/schema.md), as Arrow schemas and the rows a run collects."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

HIT_RATES_SCHEMA = pa.schema(
    [
        ("tenant", pa.string()),
        ("policy", pa.string()),
        ("policy_options", pa.string()),
        ("isolation", pa.string()),
        ("capacity_blocks", pa.int64()),
        ("capacity_tokens", pa.int64()),
        ("capacity_gib", pa.float64()),
        ("model", pa.string()),
        ("kv_dtype", pa.string()),
        ("block_size", pa.int32()),
        ("measure_window", pa.string()),
        ("requests", pa.int64()),
        ("input_tokens", pa.int64()),
        ("hit_tokens", pa.int64()),
        ("cross_tenant_hit_tokens", pa.int64()),
        ("hit_requests", pa.int64()),
        ("token_hit_rate", pa.float64()),
        ("request_hit_rate", pa.float64()),
        ("warmup_requests", pa.int64()),
        ("steady", pa.bool_()),
        ("ci_low", pa.float64()),
        ("ci_high", pa.float64()),
        ("own_warmup_requests", pa.int64()),
        ("ceiling_token_hit_rate", pa.float64()),
        ("warm_start", pa.string()),
        ("warm_requests", pa.int64()),
    ]
)

TIMESERIES_SCHEMA = pa.schema(
    [
        ("tenant", pa.string()),
        ("policy", pa.string()),
        ("isolation", pa.string()),
        ("capacity_blocks", pa.int64()),
        ("bucket_start", pa.timestamp("us", tz="UTC")),
        ("bucket_seconds", pa.float64()),
        ("requests", pa.int64()),
        ("input_tokens", pa.int64()),
        ("hit_tokens", pa.int64()),
        ("token_hit_rate", pa.float64()),
    ]
)

OUTCOMES_SCHEMA = pa.schema(
    [
        ("request_id", pa.string()),
        ("tenant", pa.string()),
        ("policy", pa.string()),
        ("isolation", pa.string()),
        ("capacity_blocks", pa.int64()),
        ("input_tokens", pa.int64()),
        ("hit_blocks", pa.int32()),
        ("hit_tokens", pa.int64()),
        ("first_miss_block", pa.int32()),
        ("cross_tenant_hit_tokens", pa.int64()),
    ]
)


@dataclass
class Tables:
    hit_rates: list[dict[str, object]] = field(default_factory=list)
    timeseries: list[pa.Table] = field(default_factory=list)  # one table a scenario
    outcomes: list[pa.Table] = field(default_factory=list)
    misses_by_gap: list[pa.Table] = field(default_factory=list)  # one table a scenario

    def extend(self, other: Tables) -> None:
        """Add another simulation's rows (a fan-out's parts come back one scenario each)."""
        self.hit_rates += other.hit_rates
        self.timeseries += other.timeseries
        self.outcomes += other.outcomes
        self.misses_by_gap += other.misses_by_gap

    def arrow(self) -> tuple[pa.Table, pa.Table, pa.Table]:
        outcomes = (
            pa.concat_tables(self.outcomes) if self.outcomes else OUTCOMES_SCHEMA.empty_table()
        )
        return (
            pa.Table.from_pylist(self.hit_rates, schema=HIT_RATES_SCHEMA),
            pa.concat_tables(self.timeseries)
            if self.timeseries
            else TIMESERIES_SCHEMA.empty_table(),
            outcomes,
        )
