-- Per tenant ('*': fleet), one `structure` run: how conversations look. Rates are ratios of
-- the stored sums; the inference_* columns compare inferred parent links with the links the
-- log gives (NULL when the log gives none).
CREATE TABLE IF NOT EXISTS session_stats (
    run_id                VARCHAR NOT NULL,
    tenant                VARCHAR NOT NULL,
    requests              BIGINT NOT NULL,
    sessions              BIGINT NOT NULL,
    multi_turn_sessions   BIGINT NOT NULL,
    mean_turns            DOUBLE,
    median_turns          DOUBLE,
    p90_turns             DOUBLE,
    max_turns             BIGINT,
    follow_ups            BIGINT NOT NULL,   -- requests with a parent
    median_gap_s          DOUBLE,            -- time between a turn and its parent
    p90_gap_s             DOUBLE,
    median_growth_tokens  DOUBLE,            -- input_tokens(turn) - input_tokens(parent)
    mean_growth_tokens    DOUBLE,
    input_tokens          BIGINT NOT NULL,
    history_tokens        BIGINT NOT NULL,
    history_share         DOUBLE,            -- history_tokens / input_tokens
    logged_links          BIGINT,            -- parent links the log gives
    inferred_links        BIGINT,            -- parent links inference finds, log ignored
    matching_links        BIGINT,            -- links in both
    inference_precision   DOUBLE,            -- matching / inferred
    inference_recall      DOUBLE             -- matching / logged
);
