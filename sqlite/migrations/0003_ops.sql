-- 0003_ops: purged counts, the workers table, and each stage's input.

-- Items deleted by Purge, per run: a run keeps counting them (Counts.Purged)
-- so that its total and success rate do not change when dead letters go.
ALTER TABLE runs ADD COLUMN purged INTEGER NOT NULL DEFAULT 0;

-- One row per started client, refreshed every heartbeat interval and deleted
-- when the client stops; expires_at tells a live row from a crashed one.
CREATE TABLE workers (
	owner      TEXT    PRIMARY KEY,
	host       TEXT    NOT NULL DEFAULT '',
	pid        INTEGER NOT NULL DEFAULT 0,
	pipelines  TEXT    NOT NULL DEFAULT '[]', -- JSON array of names
	started_at INTEGER NOT NULL,
	last_seen  INTEGER NOT NULL,
	expires_at INTEGER NOT NULL
);

-- The input each stage after the first had: the previous stage's output,
-- kept when an item moves on so that a redrive can restart it at an earlier
-- stage. The first stage's input is items.input. A trigger keeps it, so that
-- every way of completing an item does, at the cost of one indexed insert per
-- stage an item moves on to.
CREATE TABLE item_stage_inputs (
	item_id     INTEGER NOT NULL,
	stage_index INTEGER NOT NULL,
	stage       TEXT    NOT NULL,
	payload     BLOB,
	PRIMARY KEY (item_id, stage_index)
) WITHOUT ROWID;

CREATE TRIGGER items_stage_input AFTER UPDATE OF stage_index ON items
WHEN NEW.stage_index > OLD.stage_index
BEGIN
	INSERT OR REPLACE INTO item_stage_inputs (item_id, stage_index, stage, payload)
	VALUES (NEW.id, NEW.stage_index, NEW.stage, NEW.payload);
END;

CREATE TRIGGER items_stage_input_delete AFTER DELETE ON items
BEGIN
	DELETE FROM item_stage_inputs WHERE item_id = OLD.id;
END;
