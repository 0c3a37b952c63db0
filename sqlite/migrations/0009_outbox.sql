-- 0009_outbox: notifications written in the same transaction as the state
-- change they announce, and delivered later by the workers.

-- Which events of a pipeline are announced: events is a comma-separated
-- list with a comma at each end (",item.dead,run.finished,"), so that a
-- trigger tests membership with instr. A pipeline without a row announces
-- nothing, and its state changes write nothing: the triggers below find no
-- row in this small table.
CREATE TABLE outbox_subscriptions (
	pipeline   TEXT    PRIMARY KEY,
	events     TEXT    NOT NULL,
	updated_at INTEGER NOT NULL
);

-- One row per notification. status is pending until a delivery succeeds
-- (delivered) or is given up (dead). A claim leases a row by moving next_at
-- to the end of the lease and adding 1 to lease_token, so a worker that
-- vanishes leaves the row due again when its lease ends; a result applies
-- only with the current token.
CREATE TABLE outbox (
	id               INTEGER PRIMARY KEY,
	delivery_id      TEXT    NOT NULL UNIQUE,
	event            TEXT    NOT NULL,
	pipeline         TEXT    NOT NULL,
	run_id           INTEGER NOT NULL,
	item_id          INTEGER,
	item_key         TEXT,
	stage            TEXT,
	reason_class     TEXT,
	reason_error     TEXT,
	reason_attempts  INTEGER,
	run_status       TEXT,
	run_reason       TEXT,
	occurred_at      INTEGER NOT NULL,
	status           TEXT    NOT NULL DEFAULT 'pending',
	attempts         INTEGER NOT NULL DEFAULT 0,
	rate_limit_waits INTEGER NOT NULL DEFAULT 0,
	next_at          INTEGER NOT NULL,
	lease_token      INTEGER NOT NULL DEFAULT 0,
	lease_owner      TEXT,
	last_error       TEXT    NOT NULL DEFAULT '',
	updated_at       INTEGER NOT NULL
);
CREATE INDEX outbox_due ON outbox (next_at) WHERE status = 'pending';
CREATE INDEX outbox_status ON outbox (status, pipeline);

-- An item that reaches dead, succeeded or canceled, by whatever statement
-- (Complete, CancelPending, Enqueue of invalid input), is announced in the
-- transaction that changed it.
CREATE TRIGGER items_outbox_update AFTER UPDATE OF state ON items
WHEN NEW.state IN ('dead', 'succeeded', 'canceled') AND OLD.state <> NEW.state
BEGIN
	INSERT INTO outbox (delivery_id, event, pipeline, run_id, item_id, item_key, stage, reason_class,
		reason_error, reason_attempts, occurred_at, next_at, updated_at)
	SELECT lower(hex(randomblob(16))), 'item.' || NEW.state, NEW.pipeline, NEW.run_id, NEW.id, NEW.key,
		NEW.stage, NEW.reason_class, NEW.reason_error, NEW.reason_attempts,
		COALESCE(NEW.reason_at, NEW.updated_at), NEW.updated_at, NEW.updated_at
	FROM outbox_subscriptions s
	WHERE s.pipeline = NEW.pipeline AND instr(s.events, ',item.' || NEW.state || ',') > 0;
END;

CREATE TRIGGER items_outbox_insert AFTER INSERT ON items
WHEN NEW.state = 'dead'
BEGIN
	INSERT INTO outbox (delivery_id, event, pipeline, run_id, item_id, item_key, stage, reason_class,
		reason_error, reason_attempts, occurred_at, next_at, updated_at)
	SELECT lower(hex(randomblob(16))), 'item.dead', NEW.pipeline, NEW.run_id, NEW.id, NEW.key,
		NEW.stage, NEW.reason_class, NEW.reason_error, NEW.reason_attempts,
		COALESCE(NEW.reason_at, NEW.updated_at), NEW.updated_at, NEW.updated_at
	FROM outbox_subscriptions s
	WHERE s.pipeline = NEW.pipeline AND instr(s.events, ',item.dead,') > 0;
END;

CREATE TRIGGER runs_outbox AFTER UPDATE OF status ON runs
WHEN OLD.status = 'running' AND NEW.status <> 'running'
BEGIN
	INSERT INTO outbox (delivery_id, event, pipeline, run_id, run_status, run_reason, occurred_at,
		next_at, updated_at)
	SELECT lower(hex(randomblob(16))), 'run.finished', NEW.pipeline, NEW.id, NEW.status, NEW.reason,
		COALESCE(NEW.finished_at, NEW.created_at), COALESCE(NEW.finished_at, NEW.created_at),
		COALESCE(NEW.finished_at, NEW.created_at)
	FROM outbox_subscriptions s
	WHERE s.pipeline = NEW.pipeline AND instr(s.events, ',run.finished,') > 0;
END;
