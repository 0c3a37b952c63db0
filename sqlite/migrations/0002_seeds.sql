-- 0002_seeds: an item's failed attempts over all its stages (for
-- Pipeline.MaxAttempts) and the stage configuration's hash of each attempt
-- (Stage.ConfigHash, ADR-003's stage_config_hash). Existing rows get 0 and
-- '' (recorded before hashes were).

ALTER TABLE items ADD COLUMN failed_attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE attempts ADD COLUMN config_hash TEXT NOT NULL DEFAULT '';
