-- Initial schema. Times are INTEGER unix nanoseconds, UTC; NULL means unset.

CREATE TABLE runs (
	id          INTEGER PRIMARY KEY,
	pipeline    TEXT    NOT NULL,
	name        TEXT    NOT NULL DEFAULT '',
	status      TEXT    NOT NULL,
	options     TEXT    NOT NULL DEFAULT '{}',
	created_at  INTEGER NOT NULL,
	finished_at INTEGER,
	reason      TEXT    NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX runs_pipeline_name ON runs (pipeline, name) WHERE name <> '';

CREATE TABLE items (
	id               INTEGER PRIMARY KEY,
	run_id           INTEGER NOT NULL,
	pipeline         TEXT    NOT NULL,
	key              TEXT,
	stage            TEXT    NOT NULL,
	stage_index      INTEGER NOT NULL DEFAULT 0,
	state            TEXT    NOT NULL,
	priority         INTEGER NOT NULL DEFAULT 0,
	attempt          INTEGER NOT NULL DEFAULT 0,
	rate_limit_waits INTEGER NOT NULL DEFAULT 0,
	payload          BLOB,
	input            BLOB,
	enqueued_at      INTEGER NOT NULL,
	next_at          INTEGER NOT NULL,
	lease_token      INTEGER NOT NULL DEFAULT 0,
	lease_owner      TEXT,
	lease_expires_at INTEGER,
	updated_at       INTEGER NOT NULL,
	reason_stage     TEXT,
	reason_class     TEXT,
	reason_error     TEXT,
	reason_attempts  INTEGER,
	reason_at        INTEGER
);
CREATE UNIQUE INDEX items_pipeline_key ON items (pipeline, key) WHERE key IS NOT NULL;
-- Claim walks this index in claim order and stops after LIMIT due rows.
-- next_at is carried so that rows not yet due are skipped without reading
-- the table, and so that OldestDue scans the index alone. There is no
-- separate next_at index: every index costs each state change.
CREATE INDEX items_claim ON items (priority DESC, enqueued_at, id, next_at) WHERE state = 'pending';
CREATE INDEX items_run_state ON items (run_id, state);
CREATE INDEX items_lease ON items (lease_expires_at) WHERE state = 'running';
-- Dead-letter queue filters; partial, so that the hot path never touches it.
CREATE INDEX items_dlq ON items (pipeline, state, reason_class) WHERE state IN ('dead', 'canceled');

CREATE TABLE attempts (
	id          INTEGER PRIMARY KEY,
	item_id     INTEGER NOT NULL,
	run_id      INTEGER NOT NULL,
	pipeline    TEXT    NOT NULL,
	stage       TEXT    NOT NULL,
	stage_index INTEGER NOT NULL,
	number      INTEGER NOT NULL,
	outcome     TEXT    NOT NULL,
	class       TEXT    NOT NULL DEFAULT '',
	error       TEXT    NOT NULL DEFAULT '',
	started_at  INTEGER,
	finished_at INTEGER,
	delay_ns    INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX attempts_item ON attempts (item_id);
-- No run_id index: run queries reach attempts through items (run_id, state)
-- and attempts_item; each index costs every recorded attempt.
