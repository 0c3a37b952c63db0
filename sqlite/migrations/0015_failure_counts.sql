-- 0015_failure_counts: error-group counts kept as failures are written.
--
-- The console's error groups (FailureGroups) counted a million dead items
-- and a million failed attempts by grouping two indexes on every request:
-- 0.7 to 5 seconds. failure_counts holds those counts instead, per run,
-- pipeline, stage, class, fingerprint and kind: 'dead' and 'canceled' for
-- items in that state (grouped by the item's stage and its reason), 'failed'
-- for attempts with a stored fingerprint (every outcome but succeeded). A
-- read sums a few hundred rows.
--
-- Triggers keep it, and their WHEN conditions are checked without running
-- their bodies: an item is counted only when it enters or leaves the dead
-- or canceled state (or changes while in it, as the fingerprint backfill
-- does), an attempt only when it has a fingerprint, so the success path
-- (claim, succeed, move on) writes nothing more. Rows at zero are deleted.
CREATE TABLE failure_counts (
	pipeline    TEXT    NOT NULL,
	stage       TEXT    NOT NULL,
	class       TEXT    NOT NULL,
	fingerprint TEXT    NOT NULL,
	run_id      INTEGER NOT NULL,
	kind        TEXT    NOT NULL, -- dead, canceled, failed
	n           INTEGER NOT NULL,
	PRIMARY KEY (pipeline, stage, class, fingerprint, run_id, kind)
) WITHOUT ROWID;

INSERT INTO failure_counts (pipeline, stage, class, fingerprint, run_id, kind, n)
SELECT pipeline, stage, COALESCE(reason_class, ''), COALESCE(reason_fingerprint, ''), run_id, state, COUNT(*)
FROM items WHERE state IN ('dead', 'canceled')
GROUP BY 1, 2, 3, 4, 5, 6;

INSERT INTO failure_counts (pipeline, stage, class, fingerprint, run_id, kind, n)
SELECT pipeline, stage, class, fingerprint, run_id, 'failed', COUNT(*)
FROM attempts WHERE fingerprint IS NOT NULL
GROUP BY 1, 2, 3, 4, 5;

CREATE TRIGGER items_failure_insert AFTER INSERT ON items
WHEN NEW.state IN ('dead', 'canceled')
BEGIN
	INSERT INTO failure_counts (pipeline, stage, class, fingerprint, run_id, kind, n)
	VALUES (NEW.pipeline, NEW.stage, COALESCE(NEW.reason_class, ''), COALESCE(NEW.reason_fingerprint, ''), NEW.run_id, NEW.state, 1)
	ON CONFLICT DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER items_failure_update AFTER UPDATE OF state, pipeline, stage, run_id, reason_class, reason_fingerprint ON items
WHEN OLD.state IN ('dead', 'canceled') OR NEW.state IN ('dead', 'canceled')
BEGIN
	UPDATE failure_counts SET n = n - 1
	WHERE OLD.state IN ('dead', 'canceled') AND pipeline = OLD.pipeline AND stage = OLD.stage
		AND class = COALESCE(OLD.reason_class, '') AND fingerprint = COALESCE(OLD.reason_fingerprint, '')
		AND run_id = OLD.run_id AND kind = OLD.state;
	DELETE FROM failure_counts
	WHERE OLD.state IN ('dead', 'canceled') AND pipeline = OLD.pipeline AND stage = OLD.stage
		AND class = COALESCE(OLD.reason_class, '') AND fingerprint = COALESCE(OLD.reason_fingerprint, '')
		AND run_id = OLD.run_id AND kind = OLD.state AND n = 0;
	INSERT INTO failure_counts (pipeline, stage, class, fingerprint, run_id, kind, n)
	SELECT NEW.pipeline, NEW.stage, COALESCE(NEW.reason_class, ''), COALESCE(NEW.reason_fingerprint, ''), NEW.run_id, NEW.state, 1
	WHERE NEW.state IN ('dead', 'canceled')
	ON CONFLICT DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER items_failure_delete AFTER DELETE ON items
WHEN OLD.state IN ('dead', 'canceled')
BEGIN
	UPDATE failure_counts SET n = n - 1
	WHERE pipeline = OLD.pipeline AND stage = OLD.stage
		AND class = COALESCE(OLD.reason_class, '') AND fingerprint = COALESCE(OLD.reason_fingerprint, '')
		AND run_id = OLD.run_id AND kind = OLD.state;
	DELETE FROM failure_counts
	WHERE pipeline = OLD.pipeline AND stage = OLD.stage
		AND class = COALESCE(OLD.reason_class, '') AND fingerprint = COALESCE(OLD.reason_fingerprint, '')
		AND run_id = OLD.run_id AND kind = OLD.state AND n = 0;
END;

CREATE TRIGGER attempts_failure_insert AFTER INSERT ON attempts
WHEN NEW.fingerprint IS NOT NULL
BEGIN
	INSERT INTO failure_counts (pipeline, stage, class, fingerprint, run_id, kind, n)
	VALUES (NEW.pipeline, NEW.stage, NEW.class, NEW.fingerprint, NEW.run_id, 'failed', 1)
	ON CONFLICT DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER attempts_failure_update AFTER UPDATE OF fingerprint, pipeline, stage, class, run_id ON attempts
WHEN OLD.fingerprint IS NOT NULL OR NEW.fingerprint IS NOT NULL
BEGIN
	UPDATE failure_counts SET n = n - 1
	WHERE OLD.fingerprint IS NOT NULL AND pipeline = OLD.pipeline AND stage = OLD.stage AND class = OLD.class
		AND fingerprint = OLD.fingerprint AND run_id = OLD.run_id AND kind = 'failed';
	DELETE FROM failure_counts
	WHERE OLD.fingerprint IS NOT NULL AND pipeline = OLD.pipeline AND stage = OLD.stage AND class = OLD.class
		AND fingerprint = OLD.fingerprint AND run_id = OLD.run_id AND kind = 'failed' AND n = 0;
	INSERT INTO failure_counts (pipeline, stage, class, fingerprint, run_id, kind, n)
	SELECT NEW.pipeline, NEW.stage, NEW.class, NEW.fingerprint, NEW.run_id, 'failed', 1
	WHERE NEW.fingerprint IS NOT NULL
	ON CONFLICT DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER attempts_failure_delete AFTER DELETE ON attempts
WHEN OLD.fingerprint IS NOT NULL
BEGIN
	UPDATE failure_counts SET n = n - 1
	WHERE pipeline = OLD.pipeline AND stage = OLD.stage AND class = OLD.class
		AND fingerprint = OLD.fingerprint AND run_id = OLD.run_id AND kind = 'failed';
	DELETE FROM failure_counts
	WHERE pipeline = OLD.pipeline AND stage = OLD.stage AND class = OLD.class
		AND fingerprint = OLD.fingerprint AND run_id = OLD.run_id AND kind = 'failed' AND n = 0;
END;
