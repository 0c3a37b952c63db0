-- 0030_lease_batches_claimed_at: when a claim's leases began.
--
-- {schema} is replaced by the store's quoted schema name.

-- Since 0029 a claim leaves updated_at alone (it is in items_succeeded_updated's
-- key, and a claim that changed it would enter every index again). A running
-- item still reports as updated when its lease began, as a claim on SQLite
-- records it: each claim and take-over records that time in its batch, once,
-- rather than in every item's row (where it would take room that a claim's
-- heap-only version needs), and a running item's lease token names its batch.
-- Readers report the later of updated_at and the batch's claimed_at: a claim of
-- a process of the build before this column leaves claimed_at NULL, and a lease
-- never begins before its item became pending. Adding the column rewrites
-- nothing.
ALTER TABLE {schema}.lease_batches ADD COLUMN claimed_at timestamptz;
