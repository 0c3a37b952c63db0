-- 0005_ready_order: claims that never read items waiting on a backoff, and
-- an order time of each item's own.
--
-- A pending item is either ready (due when it was last written, or
-- promoted since) or waiting (its next_at was in the future). Claim walks
-- only the ready items, in claim order, and first promotes a bounded batch
-- of waiting items that have become due, oldest next_at first, through
-- items_waiting. A claim therefore reads neither the waiting backlog nor
-- depends on statistics to avoid it: there is no index on which a plan
-- could meet the waiting items in claim order.
--
-- ready only means something while state = 'pending'; a stale value is
-- harmless either way: a waiting item that is due gets promoted, and a
-- ready item that is not due yet is skipped by Claim's next_at condition.

ALTER TABLE {schema}.items ADD COLUMN order_at timestamptz;
UPDATE {schema}.items SET order_at = enqueued_at;
ALTER TABLE {schema}.items ALTER COLUMN order_at SET NOT NULL;

ALTER TABLE {schema}.items ADD COLUMN ready boolean NOT NULL DEFAULT false;
UPDATE {schema}.items SET ready = true WHERE state = 'pending' AND next_at <= now();

DROP INDEX {schema}.items_pending;
DROP INDEX {schema}.items_pending_next_at;

-- Claim walks this index in claim order and stops after the batch.
CREATE INDEX items_ready ON {schema}.items (priority DESC, order_at, id) WHERE state = 'pending' AND ready;
-- Promotion (ready = false, next_at up to now, oldest first) and OldestDue
-- (the first entry of each half). The lease condition is true of every
-- pending item; it is in the predicate so that the planner cannot choose
-- this index for Claim, whose conditions do not imply it, and sort every
-- due item (see 0001).
CREATE INDEX items_waiting ON {schema}.items (ready, next_at) WHERE state = 'pending' AND lease_expires_at IS NULL;

-- Retention deletes attempts in batches as well; vacuum them as eagerly as
-- items, so that their space is reused rather than the table growing.
ALTER TABLE {schema}.attempts SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_vacuum_cost_limit = 2000
);
