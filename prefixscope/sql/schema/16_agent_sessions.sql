-- Per session of a log that names its sessions (agent-json: a conversation, or a sub-agent),
-- one `structure` run: how an agent session looks. gap: arrival to arrival of consecutive
-- requests of the session; a tool-call loop: a run of >= 2 requests, each after the first
-- following a `tool_use` stop within the loop gap of idle time (docs/structure.md#agent-
-- sessions). Invariants: 0 < duty_cycle <= 1 where given; tool_loop_requests <= requests.
CREATE TABLE IF NOT EXISTS agent_sessions (
    run_id              VARCHAR NOT NULL,
    tenant              VARCHAR NOT NULL,
    session             VARCHAR NOT NULL,
    parent_session      VARCHAR,            -- a sub-agent's parent; NULL for a conversation
    models              VARCHAR,            -- the models its requests name, comma-separated
    requests            BIGINT NOT NULL,
    first_ts            TIMESTAMPTZ NOT NULL,
    lifetime_s          DOUBLE NOT NULL,    -- first arrival to the last request's end
    busy_s              DOUBLE,             -- sum of api_time; NULL when the log has none
    duty_cycle          DOUBLE,             -- busy_s / lifetime_s, capped at 1
    median_gap_s        DOUBLE,
    p90_gap_s           DOUBLE,
    tool_loops          BIGINT NOT NULL,
    tool_loop_requests  BIGINT NOT NULL,
    longest_tool_loop   BIGINT NOT NULL,
    subagents           BIGINT NOT NULL,    -- sessions whose parent is this one
    subagent_models     VARCHAR             -- the models of those, comma-separated
);
