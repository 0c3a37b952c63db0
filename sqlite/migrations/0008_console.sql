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
