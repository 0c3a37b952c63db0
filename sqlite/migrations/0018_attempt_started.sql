-- 0018_attempt_started: a lease says whether its attempt started.
--
-- A process leases a few items more than its free workers, so that a worker
-- that finishes finds its next item at once. When the process dies, the
-- rescuer must tell the attempts that were running (charged as lost) from
-- the leases whose handler never started (returned without an attempt).
-- attempt_started_at is when the current lease's attempt was recorded as
-- started (NULL: not recorded); a claim clears it. lease_losses counts the
-- leases of the item that expired before their start was recorded: an item
-- that has lost one is marked started before its handler runs again, so
-- that a handler that kills its process is charged its attempts.
ALTER TABLE items ADD COLUMN attempt_started_at INTEGER;
ALTER TABLE items ADD COLUMN lease_losses INTEGER NOT NULL DEFAULT 0;
