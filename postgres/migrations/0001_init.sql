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
    lease_token      bigint NOT NULL DEFAULT 0, -- odd exactly while running: see Store.Complete
    lease_owner      text NOT NULL DEFAULT '',
    lease_expires_at timestamptz,
    updated_at       timestamptz NOT NULL,
    reason_stage     text,
    reason_class     text,
    reason_error     text,
    reason_attempts  integer,
    reason_at        timestamptz
) WITH (
    fillfactor = 85,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_limit = 2000
);

-- A state change is never a HOT update: the new row version goes into
-- every index below whose predicate it matches, so each index costs on
-- every claim and completion; keep them few.

-- Keys are unique per pipeline. Partial, so that the many items without a
-- key are not in it at all.
CREATE UNIQUE INDEX items_pipeline_key ON {schema}.items (pipeline, key) WHERE key IS NOT NULL;
-- Claim walks this index in claim order; it holds pending rows only, so
-- finished rows cost nothing.
CREATE INDEX items_pending ON {schema}.items (priority DESC, enqueued_at, id) WHERE state = 'pending';
-- OldestDue. Pending items hold no lease; the predicate says so on
-- purpose, as Claim's conditions do not: the planner, misled by stale
-- statistics, would otherwise bitmap-scan this index for Claim and sort
-- every due item instead of walking items_pending.
CREATE INDEX items_pending_next_at ON {schema}.items (next_at) WHERE state = 'pending' AND lease_expires_at IS NULL;
-- Per-run filters (counts come from run_counts).
CREATE INDEX items_run_state ON {schema}.items (run_id, state);
-- ClaimExpired. The lease expiry is set exactly while an item is running.
-- The predicate does not name state on purpose: with state = 'running' in
-- it, the planner, misled by statistics taken while nothing ran, chose
-- this index for Complete and Heartbeat and joined quadratically.
CREATE INDEX items_lease ON {schema}.items (lease_expires_at) WHERE lease_expires_at IS NOT NULL;
-- Dead-letter queue filters.
CREATE INDEX items_dlq ON {schema}.items (pipeline, reason_class) WHERE state IN ('dead', 'canceled');
-- DeleteSucceeded.
CREATE INDEX items_succeeded_updated ON {schema}.items (updated_at) WHERE state = 'succeeded';

-- No foreign keys: their per-row checks would cost a third of the
-- throughput of Complete. The store deletes attempts with their items.
--
-- Attempts are only ever read by item (in id order) or scanned whole, so
-- the one index is (item_id, id): no primary key and no run index to
-- maintain on every completion. TopErrors of a run finds the attempts
-- through the run's items.
CREATE TABLE {schema}.attempts (
    id          bigserial NOT NULL,
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

CREATE INDEX attempts_item ON {schema}.attempts (item_id, id);

-- Run counts. Counting a run's items on every check (the engine checks its
-- running runs four times a second) read the whole run, a core's worth of
-- work at a million items. Instead every statement that inserts, deletes
-- or changes the state of items appends its net change per run and state
-- here, in its own transaction, so the sum of a run's rows is its count
-- exactly as a count would see it; the store folds the rows of a run into
-- one per state now and then.
CREATE TABLE {schema}.run_counts (
    run_id bigint NOT NULL,
    state  text NOT NULL,
    n      bigint NOT NULL
);
CREATE INDEX run_counts_run ON {schema}.run_counts (run_id);

CREATE FUNCTION {schema}.items_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO {schema}.run_counts (run_id, state, n)
        SELECT run_id, state, count(*) FROM new_items GROUP BY run_id, state;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO {schema}.run_counts (run_id, state, n)
        SELECT run_id, state, -count(*) FROM old_items GROUP BY run_id, state;
    ELSE
        INSERT INTO {schema}.run_counts (run_id, state, n)
        SELECT run_id, state, sum(n) FROM (
            SELECT run_id, state, count(*) AS n FROM new_items GROUP BY run_id, state
            UNION ALL
            SELECT run_id, state, -count(*) FROM old_items GROUP BY run_id, state) d
        GROUP BY run_id, state HAVING sum(n) <> 0;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER items_count_insert AFTER INSERT ON {schema}.items
    REFERENCING NEW TABLE AS new_items FOR EACH STATEMENT EXECUTE FUNCTION {schema}.items_count();
CREATE TRIGGER items_count_update AFTER UPDATE ON {schema}.items
    REFERENCING OLD TABLE AS old_items NEW TABLE AS new_items FOR EACH STATEMENT EXECUTE FUNCTION {schema}.items_count();
CREATE TRIGGER items_count_delete AFTER DELETE ON {schema}.items
    REFERENCING OLD TABLE AS old_items FOR EACH STATEMENT EXECUTE FUNCTION {schema}.items_count();
