-- 0001_init: runs, items and attempts.
--
-- {schema} is replaced by the store's quoted schema name.

CREATE TABLE {schema}.runs (
    id                bigserial PRIMARY KEY,
    pipeline          text NOT NULL,
    name              text NOT NULL DEFAULT '',
    status            text NOT NULL,
    success_threshold double precision NOT NULL DEFAULT 0,
    partial_threshold double precision NOT NULL DEFAULT 0,
    failure_budget    double precision NOT NULL DEFAULT 0,
    min_items         integer NOT NULL DEFAULT 0,
    created_at        timestamptz NOT NULL,
    finished_at       timestamptz,
    reason            text NOT NULL DEFAULT ''
);

-- A named run is unique within its pipeline; unnamed runs are not.
CREATE UNIQUE INDEX runs_pipeline_name ON {schema}.runs (pipeline, name) WHERE name <> '';
CREATE INDEX runs_pipeline_id ON {schema}.runs (pipeline, id);

-- items is the hot table: every claim, heartbeat and completion updates a
-- row. Updates change indexed columns (state is in the partial index
-- predicates) so they are rarely HOT; the lower fillfactor still lets the
-- new row versions land on the same page, and the aggressive autovacuum
-- settings keep the pending index free of dead entries so claiming stays
-- fast when the table holds millions of finished rows.
CREATE TABLE {schema}.items (
    id               bigserial PRIMARY KEY,
    run_id           bigint NOT NULL,
    pipeline         text NOT NULL,
    key              text,
    stage            text NOT NULL,
    stage_index      integer NOT NULL DEFAULT 0,
    state            text NOT NULL,
    priority         integer NOT NULL DEFAULT 0,
    attempt          integer NOT NULL DEFAULT 0,
    rate_limit_waits integer NOT NULL DEFAULT 0,
    payload          bytea,
    input            bytea,
    enqueued_at      timestamptz NOT NULL,
    next_at          timestamptz NOT NULL,
    lease_token      bigint NOT NULL DEFAULT 0,
    lease_owner      text NOT NULL DEFAULT '',
    lease_expires_at timestamptz,
    updated_at       timestamptz NOT NULL,
    reason_stage     text,
    reason_class     text,
    reason_error     text,
    reason_attempts  integer,
    reason_at        timestamptz,
    CONSTRAINT items_pipeline_key UNIQUE (pipeline, key)
) WITH (
    fillfactor = 85,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_limit = 2000
);

-- Claim walks this index in claim order; it holds pending rows only, so
-- finished rows cost nothing.
CREATE INDEX items_pending ON {schema}.items (priority DESC, enqueued_at, id) WHERE state = 'pending';
-- OldestDue.
CREATE INDEX items_pending_next_at ON {schema}.items (next_at) WHERE state = 'pending';
-- Run counts and per-run filters.
CREATE INDEX items_run_state ON {schema}.items (run_id, state);
-- ClaimExpired.
CREATE INDEX items_running_lease ON {schema}.items (lease_expires_at) WHERE state = 'running';
-- Dead-letter queue filters.
CREATE INDEX items_dlq ON {schema}.items (pipeline, reason_class) WHERE state IN ('dead', 'canceled');
-- DeleteSucceeded.
CREATE INDEX items_succeeded_updated ON {schema}.items (updated_at) WHERE state = 'succeeded';

-- No foreign keys: their per-row checks would cost a third of the
-- throughput of Complete. The store deletes attempts with their items.
CREATE TABLE {schema}.attempts (
    id          bigserial PRIMARY KEY,
    item_id     bigint NOT NULL,
    run_id      bigint NOT NULL,
    pipeline    text NOT NULL,
    stage       text NOT NULL,
    stage_index integer NOT NULL,
    number      integer NOT NULL,
    outcome     text NOT NULL,
    class       text NOT NULL DEFAULT '',
    error       text NOT NULL DEFAULT '',
    started_at  timestamptz NOT NULL,
    finished_at timestamptz NOT NULL,
    delay_ns    bigint NOT NULL DEFAULT 0
);

CREATE INDEX attempts_item ON {schema}.attempts (item_id);
CREATE INDEX attempts_run ON {schema}.attempts (run_id);
