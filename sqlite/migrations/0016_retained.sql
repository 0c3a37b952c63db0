-- 0016_retained: runs keep counting the succeeded items that retention
-- deletes, as they keep counting purged ones, so that a run's total and
-- success rate are its history and do not change when old rows go.
ALTER TABLE runs ADD COLUMN retained INTEGER NOT NULL DEFAULT 0;
