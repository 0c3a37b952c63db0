-- 0023_pace_waits: how long a run's calls waited on their stages' pace.
--
-- A stage's flow control (pace, slow start, gate) makes calls wait before
-- their attempts start, so the wait belongs to no attempt. Engines add what
-- their calls waited, per run and stage, every second; a row goes with its
-- run.
CREATE TABLE pace_waits (
	run_id    INTEGER NOT NULL,
	stage     TEXT    NOT NULL,
	calls     INTEGER NOT NULL DEFAULT 0,
	waited_ns INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (run_id, stage)
) WITHOUT ROWID;

CREATE TRIGGER runs_pace_waits AFTER DELETE ON runs
BEGIN
	DELETE FROM pace_waits WHERE run_id = OLD.id;
END;
