-- 0008_console: the audit log of operators' actions.
--
-- {schema} is replaced by the store's quoted schema name.

-- One row per action taken on items (a redrive, a purge...) through the API,
-- the web console or the command: who, on what selection, how many, when.
CREATE TABLE {schema}.audit_log (
    id     bigserial PRIMARY KEY,
    at     timestamptz NOT NULL,
    actor  text NOT NULL,
    kind   text NOT NULL,
    filter text NOT NULL DEFAULT '',
    count  integer NOT NULL DEFAULT 0,
    detail text NOT NULL DEFAULT ''
);

-- Paused stages: engines in every process skip them when they claim, until
-- the row is deleted (resumed).
CREATE TABLE {schema}.paused_stages (
    pipeline  text NOT NULL,
    stage     text NOT NULL,
    paused_by text NOT NULL DEFAULT '',
    paused_at timestamptz NOT NULL,
    PRIMARY KEY (pipeline, stage)
);
