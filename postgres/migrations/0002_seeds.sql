-- 0002_seeds: an item's failed attempts over all its stages (for
-- Pipeline.MaxAttempts) and the stage configuration's hash of each attempt
-- (Stage.ConfigHash, ADR-003's stage_config_hash). Existing rows get 0 and
-- '' (recorded before hashes were). Adding a column with a constant default
-- rewrites no rows.
--
-- {schema} is replaced by the store's quoted schema name.

ALTER TABLE {schema}.items ADD COLUMN failed_attempts integer NOT NULL DEFAULT 0;
ALTER TABLE {schema}.attempts ADD COLUMN config_hash text NOT NULL DEFAULT '';
