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
