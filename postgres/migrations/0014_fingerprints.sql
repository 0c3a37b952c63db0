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
-- (new rows never match them). On PostgreSQL each batch is a transaction
-- of its own, so a big table is never locked for long; the migration
-- itself only adds nullable columns (no rewrite) and builds the indexes,
-- which hold writes on the table while they are built: on a table of
-- millions of rows, apply it in a quiet moment (docs/operations.md).
--
-- {schema} is replaced by the store's quoted schema name.
ALTER TABLE {schema}.items ADD COLUMN reason_fingerprint TEXT;
ALTER TABLE {schema}.attempts ADD COLUMN fingerprint TEXT;

-- Dead and canceled items grouped by cause, read from the index alone:
-- group order, the state and the run carried for the filters. Partial, so
-- the success path never touches it; queries of dead or canceled items
-- state the index's condition word for word, which is how SQLite knows it
-- applies. It also counts the dead-letter queue by pipeline and stage.
-- The ID orders each group, so that a group's newest deaths (its examples)
-- are read backwards from its end, not sorted out of all of it.
CREATE INDEX items_cause ON {schema}.items (pipeline, stage, reason_class, reason_fingerprint, id)
    INCLUDE (state, run_id) WHERE state IN ('dead', 'canceled');
-- The console's error-group filter, in ID order (the first page).
CREATE INDEX items_fingerprint ON {schema}.items (reason_fingerprint, id) WHERE reason_fingerprint IS NOT NULL;
-- Failed attempts grouped by cause, from the index alone.
CREATE INDEX attempts_cause ON {schema}.attempts (pipeline, stage, class, fingerprint, run_id)
    WHERE fingerprint IS NOT NULL;

CREATE INDEX items_fingerprint_todo ON {schema}.items (id)
    WHERE reason_error IS NOT NULL AND reason_fingerprint IS NULL;
CREATE INDEX attempts_fingerprint_todo ON {schema}.attempts (id)
    WHERE outcome <> 'succeeded' AND fingerprint IS NULL;
