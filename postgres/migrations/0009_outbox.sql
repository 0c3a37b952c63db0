-- 0009_outbox: notifications written in the same transaction as the state
-- change they announce, and delivered later by the workers.
--
-- {schema} is replaced by the store's quoted schema name.

-- Which events of a pipeline are announced. A pipeline without a row
-- announces nothing; while the table is empty the item trigger returns
-- after one probe of it, so the hot path without webhooks stays as it was.
CREATE TABLE {schema}.outbox_subscriptions (
    pipeline   text PRIMARY KEY,
    events     text[] NOT NULL,
    updated_at timestamptz NOT NULL
);

-- One row per notification. status is pending until a delivery succeeds
-- (delivered) or is given up (dead). A claim leases a row by moving next_at
-- to the end of the lease and adding 1 to lease_token, so a worker that
-- vanishes leaves the row due again when its lease ends; a result applies
-- only with the current token.
CREATE TABLE {schema}.outbox (
    id               bigserial PRIMARY KEY,
    delivery_id      text NOT NULL UNIQUE DEFAULT gen_random_uuid()::text,
    event            text NOT NULL,
    pipeline         text NOT NULL,
    run_id           bigint NOT NULL,
    item_id          bigint,
    item_key         text,
    stage            text,
    reason_class     text,
    reason_error     text,
    reason_attempts  integer,
    run_status       text,
    run_reason       text,
    occurred_at      timestamptz NOT NULL,
    status           text NOT NULL DEFAULT 'pending',
    attempts         integer NOT NULL DEFAULT 0,
    rate_limit_waits integer NOT NULL DEFAULT 0,
    next_at          timestamptz NOT NULL,
    lease_token      bigint NOT NULL DEFAULT 0,
    lease_owner      text NOT NULL DEFAULT '',
    last_error       text NOT NULL DEFAULT '',
    updated_at       timestamptz NOT NULL
);
CREATE INDEX outbox_due ON {schema}.outbox (next_at) WHERE status = 'pending';
CREATE INDEX outbox_status ON {schema}.outbox (status, pipeline);

-- Items that reach dead, succeeded or canceled, by whatever statement
-- (Complete, CancelPending, Enqueue of invalid input), are announced in the
-- transaction that changed them. A statement trigger reads the transition
-- tables that items_count already makes the statement keep.
CREATE FUNCTION {schema}.items_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM {schema}.outbox_subscriptions) THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' THEN
        INSERT INTO {schema}.outbox (event, pipeline, run_id, item_id, item_key, stage, reason_class,
            reason_error, reason_attempts, occurred_at, next_at, updated_at)
        SELECT 'item.' || n.state, n.pipeline, n.run_id, n.id, n.key, n.stage, n.reason_class,
            n.reason_error, n.reason_attempts, coalesce(n.reason_at, n.updated_at), n.updated_at, n.updated_at
        FROM new_items n JOIN {schema}.outbox_subscriptions s ON s.pipeline = n.pipeline
        WHERE n.state = 'dead' AND 'item.dead' = ANY (s.events)
        ORDER BY n.id;
    ELSE
        INSERT INTO {schema}.outbox (event, pipeline, run_id, item_id, item_key, stage, reason_class,
            reason_error, reason_attempts, occurred_at, next_at, updated_at)
        SELECT 'item.' || n.state, n.pipeline, n.run_id, n.id, n.key, n.stage, n.reason_class,
            n.reason_error, n.reason_attempts, coalesce(n.reason_at, n.updated_at), n.updated_at, n.updated_at
        FROM new_items n JOIN old_items o ON o.id = n.id
            JOIN {schema}.outbox_subscriptions s ON s.pipeline = n.pipeline
        WHERE n.state IN ('dead', 'succeeded', 'canceled') AND o.state <> n.state
            AND 'item.' || n.state = ANY (s.events)
        ORDER BY n.id;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER items_outbox_insert AFTER INSERT ON {schema}.items
    REFERENCING NEW TABLE AS new_items FOR EACH STATEMENT EXECUTE FUNCTION {schema}.items_outbox();
CREATE TRIGGER items_outbox_update AFTER UPDATE ON {schema}.items
    REFERENCING OLD TABLE AS old_items NEW TABLE AS new_items FOR EACH STATEMENT EXECUTE FUNCTION {schema}.items_outbox();

-- A run leaving running (FinishRun, SetRunStatus) is announced. A row
-- trigger whose WHEN condition is checked without calling the function.
CREATE FUNCTION {schema}.runs_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.outbox (event, pipeline, run_id, run_status, run_reason, occurred_at, next_at, updated_at)
    SELECT 'run.finished', NEW.pipeline, NEW.id, NEW.status, NEW.reason,
        coalesce(NEW.finished_at, NEW.created_at), coalesce(NEW.finished_at, NEW.created_at),
        coalesce(NEW.finished_at, NEW.created_at)
    FROM {schema}.outbox_subscriptions s
    WHERE s.pipeline = NEW.pipeline AND 'run.finished' = ANY (s.events);
    RETURN NULL;
END
$$;

CREATE TRIGGER runs_outbox AFTER UPDATE OF status ON {schema}.runs
    FOR EACH ROW WHEN (OLD.status = 'running' AND NEW.status <> 'running')
    EXECUTE FUNCTION {schema}.runs_outbox();
