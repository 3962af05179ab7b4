-- Per request (one `structure` run): its parent (the previous turn of its conversation), turn
-- number and session, each with whether it was inferred from the block chains (true) or taken
-- from the log (false). Invariants: a parent is an earlier request of the same tenant; an
-- inferred parent's full blocks are a leading run of the request's blocks; turn = 1 without
-- a parent. Rules in docs/structure.md.
CREATE TABLE IF NOT EXISTS turns (
    run_id             VARCHAR NOT NULL,
    request_id         VARCHAR NOT NULL,
    tenant             VARCHAR NOT NULL,
    session            VARCHAR NOT NULL,  -- log session id, 'chat:<root chat_id>', or the request_id of its first request
    session_inferred   BOOLEAN NOT NULL,
    parent_request_id  VARCHAR,           -- NULL: first turn, or its parent is not in the warehouse
    parent_inferred    BOOLEAN NOT NULL,
    turn               INTEGER NOT NULL,
    turn_inferred      BOOLEAN NOT NULL,
    request_kind       VARCHAR NOT NULL,  -- the log's request_type, else 'first-turn' / 'follow-up'
    arrival_ts         TIMESTAMPTZ NOT NULL,
    input_tokens       BIGINT NOT NULL,
    history_tokens     BIGINT NOT NULL,   -- tokens of the leading blocks shared with the parent
    gap_s              DOUBLE             -- seconds since the parent arrived
);
