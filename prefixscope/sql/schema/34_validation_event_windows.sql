-- validate --events over time: for each engine rank at its best capacity, the blocks the
-- engine and the simulated pool held at the end of each window (validation_events' windows).
CREATE TABLE IF NOT EXISTS validation_event_windows (
    run_id           VARCHAR NOT NULL,
    rank             INTEGER NOT NULL,
    model            VARCHAR NOT NULL,
    capacity_blocks  BIGINT NOT NULL,
    window_end       TIMESTAMPTZ NOT NULL,
    engine_blocks    BIGINT NOT NULL,
    sim_blocks       BIGINT NOT NULL,
    both_blocks      BIGINT NOT NULL
);
