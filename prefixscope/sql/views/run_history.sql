-- The trend across runs: the last 30 runs per tenant (the fleet is tenant '*'), newest first.
-- A run is a simulate run that kept per-request outcomes (outcome_configurations), stale or
-- fresh. Each follows one configuration, the priced one: the configuration the newest savings
-- run priced from that run's outcomes, else the run's only outcomes configuration. The
-- fleet_report flow keeps and prices one: lru, shared, at its grid's middle capacity.
-- Its token hit rate is over the 'steady' window when the run measured one and the fleet's
-- cache filled (steady), else over 'all' (measure_window says which); the savings are that
-- pricing's (NULL when none). effective_capacity_blocks is the fleet's (tenant '*' only: the
-- tenants share its cache) from the newest succeeded validate run over the same data as the
-- run, i.e. after the same latest ingest; NULL without one.
WITH ingests AS (
    SELECT finished_at FROM runs WHERE command = 'ingest' AND status = 'succeeded'
),
validated AS (
    SELECT v.capacity_blocks, r.finished_at,
           (SELECT max(i.finished_at) FROM ingests i WHERE i.finished_at <= r.started_at) AS data
    FROM validation v
    JOIN runs r ON r.run_id = v.run_id AND r.status = 'succeeded'
    WHERE v.tenant = '*'
),
configurations AS (
    SELECT c.*, count(*) OVER (PARTITION BY c.run_id) AS kept
    FROM outcome_configurations c
),
priced AS (
    SELECT s.outcomes_run_id, s.policy, s.isolation, s.capacity_blocks, s.run_id AS savings_run_id
    FROM savings s
    JOIN runs r ON r.run_id = s.run_id AND r.status = 'succeeded'
    WHERE s.tenant = '*'
    QUALIFY row_number() OVER (
        PARTITION BY s.outcomes_run_id ORDER BY r.finished_at DESC, s.run_id DESC
    ) = 1
),
followed AS (
    SELECT c.run_id, c.policy, c.isolation, c.capacity_blocks, p.savings_run_id
    FROM configurations c
    LEFT JOIN priced p ON p.outcomes_run_id = c.run_id
    WHERE (p.outcomes_run_id IS NULL AND c.kept = 1)
       OR (c.policy = p.policy AND c.isolation = p.isolation
           AND c.capacity_blocks IS NOT DISTINCT FROM p.capacity_blocks)
),
windowed AS (
    SELECT f.*,
           (SELECT max(i.finished_at) FROM ingests i JOIN runs r ON r.run_id = f.run_id
            WHERE i.finished_at <= r.started_at) AS data,
           CASE WHEN EXISTS (
               SELECT 1 FROM hit_rates h
               WHERE h.run_id = f.run_id AND h.tenant = '*' AND h.measure_window = 'steady'
                 AND h.policy = f.policy AND h.isolation = f.isolation
                 AND h.capacity_blocks IS NOT DISTINCT FROM f.capacity_blocks AND h.steady
           ) THEN 'steady' ELSE 'all' END AS measure_window
    FROM followed f
)
SELECT w.run_id, r.started_at AS run_at, h.tenant, w.policy, w.isolation, w.capacity_blocks,
       w.measure_window, h.requests, h.token_hit_rate, h.ci_low, h.ci_high,
       h.cross_tenant_hit_tokens, w.savings_run_id, s.model, s.gpu, s.cost_model,
       s.saved_share, s.gpu_seconds_saved_per_hour,
       CASE WHEN h.tenant = '*' THEN (
           SELECT v.capacity_blocks FROM validated v
           WHERE v.data IS NOT DISTINCT FROM w.data ORDER BY v.finished_at DESC LIMIT 1
       ) END::BIGINT AS effective_capacity_blocks
FROM windowed w
JOIN runs r ON r.run_id = w.run_id
JOIN hit_rates h
  ON h.run_id = w.run_id AND h.measure_window = w.measure_window AND h.policy = w.policy
 AND h.isolation = w.isolation AND h.capacity_blocks IS NOT DISTINCT FROM w.capacity_blocks
LEFT JOIN savings s ON s.run_id = w.savings_run_id AND s.tenant = h.tenant
QUALIFY row_number() OVER (PARTITION BY h.tenant ORDER BY r.started_at DESC, w.run_id DESC) <= 30
ORDER BY r.started_at DESC, w.run_id DESC, h.tenant <> '*', h.tenant
