-- The simulator's pool beside the engine's KV cache events (prefixscope validate --events):
-- one row per (run, engine rank, capacity scanned); best marks the capacity that agrees best
-- (highest jaccard, the smaller capacity among equals): the effective capacity. Over `windows`
-- equal windows of the engine's event span, the blocks each side held at each window's end,
-- pooled: engine_blocks, sim_blocks, both_blocks; engine_held_share = both / engine (of what
-- the engine held, the share the simulated pool held), sim_held_share = both / sim, jaccard =
-- both / (engine + sim - both). Blocks are compared by prefixscope id; unlinked_events counts
-- the rank's engine rows without one (left out). Eviction order: the k-th BlockRemoved of a
-- block paired with the pool's k-th eviction of it within the span; removal_match_share =
-- removals_matched / engine_removals, kendall_tau the rank correlation of the pairs' positions
-- (NULL: fewer than 2 pairs). model names the pool model (vllm, lru); requests those
-- attributed to the rank; requests_waited those the pool made wait for blocks; tpot_ms and
-- prefill_tokens_per_s the service-time model.
CREATE TABLE IF NOT EXISTS validation_events (
    run_id                VARCHAR NOT NULL,
    rank                  INTEGER NOT NULL,
    model                 VARCHAR NOT NULL,
    capacity_blocks       BIGINT NOT NULL,
    best                  BOOLEAN NOT NULL,
    requests              BIGINT NOT NULL,
    windows               INTEGER NOT NULL,
    engine_blocks         BIGINT NOT NULL,
    sim_blocks            BIGINT NOT NULL,
    both_blocks           BIGINT NOT NULL,
    engine_held_share     DOUBLE,
    sim_held_share        DOUBLE,
    jaccard               DOUBLE NOT NULL,
    engine_removals       BIGINT NOT NULL,
    sim_evictions         BIGINT NOT NULL,
    removals_matched      BIGINT NOT NULL,
    removal_match_share   DOUBLE,
    kendall_tau           DOUBLE,
    requests_waited       BIGINT NOT NULL,
    engine_peak_blocks    BIGINT NOT NULL,
    unlinked_events       BIGINT NOT NULL,
    tpot_ms               DOUBLE NOT NULL,
    prefill_tokens_per_s  DOUBLE NOT NULL
);
