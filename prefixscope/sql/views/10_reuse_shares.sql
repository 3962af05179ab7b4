-- Share of block reuses within 10 s, 1 min, 10 min and 1 h, per structure run, tenant and
-- request kind (filter by run_id; latest_reuse_shares holds the latest structure run's). Bin
-- upper edges include these limits, so each share is a sum of whole bins. Named 10_... so it is
-- created before latest_reuse_shares.
SELECT run_id, tenant, request_kind,
       sum(reuses) AS reuses,
       sum(reuses) FILTER (WHERE high_s <= 10) / nullif(sum(reuses), 0)   AS within_10s,
       sum(reuses) FILTER (WHERE high_s <= 60) / nullif(sum(reuses), 0)   AS within_1m,
       sum(reuses) FILTER (WHERE high_s <= 600) / nullif(sum(reuses), 0)  AS within_10m,
       sum(reuses) FILTER (WHERE high_s <= 3600) / nullif(sum(reuses), 0) AS within_1h
FROM reuse_times
GROUP BY run_id, tenant, request_kind
ORDER BY run_id, tenant <> '*', tenant, request_kind <> '*', request_kind
