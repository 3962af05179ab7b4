-- A prefill cost model fitted to one replay's samples (each sample gives two points: its miss
-- and its hit): seconds = coef_a + coef_new*max(new, knee_linear_tokens) + coef_cached*cached
-- + coef_new_cached*max(new, knee_attention_tokens)*cached + coef_new_sq*new^2, every
-- coefficient >= 0 (a knee of 1: none).
-- Its error is measured on the held-out samples only. roofline_share: median over all points
-- of roofline time / measured time (1 = at the roofline of `gpu`).
CREATE TABLE IF NOT EXISTS miss_cost_models (
    run_id                       VARCHAR NOT NULL,
    model                        VARCHAR NOT NULL,
    device                       VARCHAR NOT NULL,
    gpu                          VARCHAR NOT NULL,
    dtype                        VARCHAR NOT NULL,
    formula                      VARCHAR NOT NULL,
    coef_a                       DOUBLE NOT NULL,
    coef_new                     DOUBLE NOT NULL,
    coef_cached                  DOUBLE NOT NULL,
    coef_new_cached              DOUBLE NOT NULL,
    coef_new_sq                  DOUBLE NOT NULL,
    knee_linear_tokens           DOUBLE NOT NULL,
    knee_attention_tokens        DOUBLE NOT NULL,
    fit_points                   INTEGER NOT NULL,
    holdout_points               INTEGER NOT NULL,
    holdout_median_abs_pct_err   DOUBLE,
    holdout_p90_abs_pct_err      DOUBLE,
    roofline_share               DOUBLE,
    max_input_tokens             BIGINT NOT NULL
);
