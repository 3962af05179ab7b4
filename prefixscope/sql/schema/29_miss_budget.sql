-- Where every prompt token went, per (run, fleet configuration, measure window, tenant): one
-- row a part (analysis/fleet/budget.py). tenant '*' is the whole fleet. The parts: hit_hbm,
-- hit_dram, hit_store (served, by tier); always_computed (a prompt's last token's block, a
-- token source's unhashed tail: no cache serves them); never_seen (no earlier prompt named
-- it: the workload's floor); slower_tier_recomputed (held in DRAM or the store, cheaper to
-- recompute than to copy); behind_a_miss (cached on the replica, after a block that was not:
-- the leading-run rule); other_replica (another replica held it: routing); evicted (cached
-- once, dropped since: capacity, ttl); not_yet_cached (named by a request still queued, not
-- computed yet: pools under load). lever: what wins that part back (NULL: nothing, or a hit).
-- gpu_seconds prices each part with the fleet's step cost, every GPU of a replica counted: a
-- hit part's saving (transfers paid), else what serving that part alone on top of the hits
-- would save (analysis/fleet/budget.py part_seconds).
-- Invariant: per (run, configuration, window, tenant) the parts' tokens add up to
-- input_tokens, and their shares to 1. The configuration key is latest_fleet_hit_rates'.
CREATE TABLE IF NOT EXISTS miss_budget (
    run_id           VARCHAR NOT NULL,
    tenant           VARCHAR NOT NULL,
    router           VARCHAR NOT NULL,
    replicas         INTEGER NOT NULL,
    capacity_blocks  BIGINT NOT NULL,
    policy           VARCHAR NOT NULL,
    load_scale       DOUBLE NOT NULL,
    dram_blocks      BIGINT NOT NULL,
    dram_gbps        DOUBLE,
    store_blocks     BIGINT,
    store_unbounded  BOOLEAN,
    store_gbps       DOUBLE,
    model            VARCHAR,
    gpu              VARCHAR,
    deployment       VARCHAR,
    engine           VARCHAR NOT NULL,
    measure_window   VARCHAR NOT NULL,
    part             VARCHAR NOT NULL,
    lever            VARCHAR,
    tokens           BIGINT NOT NULL,
    input_tokens     BIGINT NOT NULL,   -- the group's prompt tokens in the window
    share            DOUBLE,            -- tokens / input_tokens; NULL when there are none
    gpu_seconds      DOUBLE             -- a hit part: the prefill GPU-seconds it saved; else
                                        -- what serving it too would save (NULL: unpriced)
);
-- How far the router's view of the caches lagged them (--router-delay, kv-aware; 0: it read
-- them as they were; NULL in older rows: 0). Part of the configuration's key.
ALTER TABLE miss_budget ADD COLUMN IF NOT EXISTS router_delay_ms DOUBLE;
