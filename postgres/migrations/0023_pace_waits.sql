-- 0023_pace_waits: how long a run's calls waited on their stages' pace.
--
-- A stage's flow control (pace, slow start, gate) makes calls wait before
-- their attempts start, so the wait belongs to no attempt. Engines add what
-- their calls waited, per run and stage, every second; a row goes with its
-- run.
CREATE TABLE {schema}.pace_waits (
    run_id    bigint NOT NULL REFERENCES {schema}.runs (id) ON DELETE CASCADE,
    stage     text   NOT NULL,
    calls     bigint NOT NULL DEFAULT 0,
    waited_ns bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, stage)
);
