"""The Arrow schemas of the structure tables (columns: docs/schema.md)."""

from __future__ import annotations

import pyarrow as pa

SESSION_STATS_SCHEMA = pa.schema(
    [
        ("tenant", pa.string()),
        ("requests", pa.int64()),
        ("sessions", pa.int64()),
        ("multi_turn_sessions", pa.int64()),
        ("mean_turns", pa.float64()),
        ("median_turns", pa.float64()),
        ("p90_turns", pa.float64()),
        ("max_turns", pa.int64()),
        ("follow_ups", pa.int64()),
        ("median_gap_s", pa.float64()),
        ("p90_gap_s", pa.float64()),
        ("median_growth_tokens", pa.float64()),
        ("mean_growth_tokens", pa.float64()),
        ("input_tokens", pa.int64()),
        ("history_tokens", pa.int64()),
        ("history_share", pa.float64()),
        ("logged_links", pa.int64()),
        ("inferred_links", pa.int64()),
        ("matching_links", pa.int64()),
        ("inference_precision", pa.float64()),
        ("inference_recall", pa.float64()),
    ]
)
HIT_SOURCES_SCHEMA = pa.schema(
    [
        ("tenant", pa.string()),
        ("policy", pa.string()),
        ("capacity_blocks", pa.int64()),
        ("requests", pa.int64()),
        ("input_tokens", pa.int64()),
        ("hit_tokens", pa.int64()),
        ("own_session_tokens", pa.int64()),
        ("shared_prefix_tokens", pa.int64()),
        ("other_tenant_tokens", pa.int64()),
    ]
)
SHARED_PREFIXES_SCHEMA = pa.schema(
    [
        ("rank", pa.int32()),
        ("prefix_hash", pa.uint64()),
        ("blocks", pa.int32()),
        ("tokens", pa.int64()),
        ("sessions", pa.int64()),
        ("requests", pa.int64()),
        ("tenants", pa.int64()),
        ("tenant_names", pa.list_(pa.string())),
        ("first_seen", pa.timestamp("us", tz="UTC")),
        ("last_seen", pa.timestamp("us", tz="UTC")),
        ("median_gap_s", pa.float64()),
        ("capacity_blocks", pa.int64()),
        ("lru_hit_tokens", pa.int64()),
        ("pinned_hit_tokens", pa.int64()),
        ("tokens_saved", pa.int64()),
    ]
)
FIRST_NEW_SCHEMA = pa.schema(
    [
        ("tenant", pa.string()),
        ("from_block", pa.int32()),
        ("to_block", pa.int32()),
        ("from_token", pa.int64()),
        ("to_token", pa.int64()),
        ("requests", pa.int64()),
        ("input_tokens", pa.int64()),
        ("novel_tokens", pa.int64()),
    ]
)
REUSE_SCHEMA = pa.schema(
    [
        ("tenant", pa.string()),
        ("request_kind", pa.string()),
        ("low_s", pa.float64()),
        ("high_s", pa.float64()),
        ("reuses", pa.int64()),
        ("reuse_tokens", pa.int64()),
    ]
)
AGENT_SESSIONS_SCHEMA = pa.schema(
    [
        ("tenant", pa.string()),
        ("session", pa.string()),
        ("parent_session", pa.string()),
        ("models", pa.string()),
        ("requests", pa.int64()),
        ("first_ts", pa.timestamp("us", tz="UTC")),
        ("lifetime_s", pa.float64()),
        ("busy_s", pa.float64()),
        ("duty_cycle", pa.float64()),
        ("median_gap_s", pa.float64()),
        ("p90_gap_s", pa.float64()),
        ("tool_loops", pa.int64()),
        ("tool_loop_requests", pa.int64()),
        ("longest_tool_loop", pa.int64()),
        ("subagents", pa.int64()),
        ("subagent_models", pa.string()),
    ]
)
