-- 0014_fingerprints: the cause of each failure, stored when it is written.
--
-- The console groups dead items and failed attempts by the fingerprint of
-- their error message (redrive.Fingerprint). Computed at read time, a
-- million distinct messages meant a million groups to read and merge; the
-- store now writes the fingerprint next to the message: on items when a
-- reason is written (dead, canceled), on attempts whose outcome is not
-- succeeded. The function is Go's (regular expressions), so the rows
-- written before this migration are filled in by the store when it opens
-- (backfillFingerprints), in batches, through the *_fingerprint_todo
-- indexes, which are empty once that is done and cost a write nothing
-- (new rows never match them).
ALTER TABLE items ADD COLUMN reason_fingerprint TEXT;
ALTER TABLE attempts ADD COLUMN fingerprint TEXT;

-- Dead and canceled items grouped by cause, read from the index alone:
-- group order, the state and the run carried for the filters. Partial, so
-- the success path never touches it; queries of dead or canceled items
-- state the index's condition word for word, which is how SQLite knows it
-- applies. It also counts the dead-letter queue by pipeline and stage.
CREATE INDEX items_cause ON items (pipeline, stage, reason_class, reason_fingerprint, state, run_id)
	WHERE state IN ('dead', 'canceled');
-- The console's error-group filter, in ID order (the first page).
CREATE INDEX items_fingerprint ON items (reason_fingerprint) WHERE reason_fingerprint IS NOT NULL;
-- Failed attempts grouped by cause, from the index alone.
CREATE INDEX attempts_cause ON attempts (pipeline, stage, class, fingerprint, run_id)
	WHERE fingerprint IS NOT NULL;

CREATE INDEX items_fingerprint_todo ON items (id)
	WHERE reason_error IS NOT NULL AND reason_fingerprint IS NULL;
CREATE INDEX attempts_fingerprint_todo ON attempts (id)
	WHERE outcome <> 'succeeded' AND fingerprint IS NULL;
