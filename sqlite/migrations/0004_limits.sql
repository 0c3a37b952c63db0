-- 0004_limits: rate limits shared by every process using the file.
-- One pace per dependency: the theoretical arrival time of its next call
-- (GCRA), and its gate (a Retry-After for everybody). Times are INTEGER unix
-- nanoseconds; 0 means unset.
CREATE TABLE limits (
	name       TEXT    PRIMARY KEY,
	tat        INTEGER NOT NULL DEFAULT 0,
	gate_until INTEGER NOT NULL DEFAULT 0
);
