-- The SLO planner's answers: one row per (run, load_scale, prefix_caching). met: some fleet
-- searched meets every target of slo; the fleet columns are then the cheapest that does, else
-- the closest searched (the greatest least slack), which is no answer. fleets_searched counts
-- the fleets simulated for this row (plan_slo_fleets). On the caching row, gpus_saved and
-- usd_saved_per_month (730 hours) are what the cache saves against the no-cache row of the same
-- load scale, NULL unless both are met.
CREATE TABLE IF NOT EXISTS plan_slo_answers (
    run_id                  VARCHAR NOT NULL,
    load_scale              DOUBLE NOT NULL,
    slo                     VARCHAR NOT NULL,
    prefix_caching          BOOLEAN NOT NULL,
    met                     BOOLEAN NOT NULL,
    deployment              VARCHAR,
    replicas                INTEGER,
    gpus                    INTEGER,
    router                  VARCHAR,
    dram_gib_per_replica    DOUBLE,
    store_gib               DOUBLE,
    usd_per_hour            DOUBLE,
    ttft_p95_s              DOUBLE,
    binding                 VARCHAR,
    fleets_searched         BIGINT NOT NULL,
    gpus_saved              INTEGER,
    usd_saved_per_month     DOUBLE
);
-- The windows the SLO is held in (added later; NULL on rows of older versions): window_s
-- seconds each (NULL: the whole trace as one window), windows of them with requests; the
-- search ran on windows_searched of them (the busiest by arriving tokens first) and the answer
-- was checked in windows_checked (every window; 0 when no fleet met); bound_window_start_s to
-- bound_window_end_s (seconds after the first arrival) is the window whose latencies bind the
-- answer, the one with the least slack.
ALTER TABLE plan_slo_answers ADD COLUMN IF NOT EXISTS window_s DOUBLE;
ALTER TABLE plan_slo_answers ADD COLUMN IF NOT EXISTS windows INTEGER;
ALTER TABLE plan_slo_answers ADD COLUMN IF NOT EXISTS windows_searched INTEGER;
ALTER TABLE plan_slo_answers ADD COLUMN IF NOT EXISTS windows_checked INTEGER;
ALTER TABLE plan_slo_answers ADD COLUMN IF NOT EXISTS bound_window_start_s DOUBLE;
ALTER TABLE plan_slo_answers ADD COLUMN IF NOT EXISTS bound_window_end_s DOUBLE;
-- What priced the steps (added later; NULL on older rows): cost_model 'measured', 'calibrated',
-- 'shipped:FILE' or 'roofline' (a lower bound). Where it is 'measured', the answer's range
-- within the model's measured error: the same search with every step slower_pct % slower, its
-- cheapest fleet's gpus_if_slower and usd_per_hour_if_slower (NULL where none met).
ALTER TABLE plan_slo_answers ADD COLUMN IF NOT EXISTS cost_model VARCHAR;
ALTER TABLE plan_slo_answers ADD COLUMN IF NOT EXISTS slower_pct DOUBLE;
ALTER TABLE plan_slo_answers ADD COLUMN IF NOT EXISTS gpus_if_slower INTEGER;
ALTER TABLE plan_slo_answers ADD COLUMN IF NOT EXISTS usd_per_hour_if_slower DOUBLE;
-- With --per-window (added later; NULL otherwise): the GPU-hours of the static answer (gpus
-- over every window from the first to the last) and of each window's answer searched alone
-- (plan_slo_windows; a window where none meets at the static answer's gpus, counted in
-- windows_unmet_alone): what a perfect autoscaler would run, a lower bound.
ALTER TABLE plan_slo_answers ADD COLUMN IF NOT EXISTS gpu_hours_static DOUBLE;
ALTER TABLE plan_slo_answers ADD COLUMN IF NOT EXISTS gpu_hours_per_window DOUBLE;
ALTER TABLE plan_slo_answers ADD COLUMN IF NOT EXISTS windows_unmet_alone INTEGER;
