-- 0008_console: the audit log of operators' actions.

-- One row per action taken on items (a redrive, a purge...) through the API,
-- the web console or the command: who, on what selection, how many, when.
CREATE TABLE audit_log (
	id     INTEGER PRIMARY KEY,
	at     INTEGER NOT NULL,
	actor  TEXT    NOT NULL,
	kind   TEXT    NOT NULL,
	filter TEXT    NOT NULL DEFAULT '',
	count  INTEGER NOT NULL DEFAULT 0,
	detail TEXT    NOT NULL DEFAULT ''
);

-- Paused stages: engines in every process skip them when they claim, until
-- the row is deleted (resumed).
CREATE TABLE paused_stages (
	pipeline  TEXT    NOT NULL,
	stage     TEXT    NOT NULL,
	paused_by TEXT    NOT NULL DEFAULT '',
	paused_at INTEGER NOT NULL,
	PRIMARY KEY (pipeline, stage)
) WITHOUT ROWID;
