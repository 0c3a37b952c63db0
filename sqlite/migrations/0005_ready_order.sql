-- 0005_ready_order: claims that never read items waiting on a backoff, and
-- an order time of each item's own.
--
-- A pending item is either ready (ready = 1: due when it was last written,
-- or promoted since) or waiting (ready = 0: its next_at was in the
-- future). Claim walks only the ready items, in claim order, and first
-- promotes a bounded batch of waiting items that have become due, oldest
-- next_at first, through items_waiting; so a claim never reads the waiting
-- backlog. ready only means something while state = 'pending'; a stale
-- value is harmless either way: a waiting item that is due gets promoted,
-- and a ready item that is not due yet is skipped by Claim's next_at
-- condition (carried in items_ready, so without reading the row).

ALTER TABLE items ADD COLUMN order_at INTEGER;
UPDATE items SET order_at = enqueued_at;
ALTER TABLE items ADD COLUMN ready INTEGER NOT NULL DEFAULT 0;
UPDATE items SET ready = 1 WHERE state = 'pending' AND next_at <= CAST(unixepoch('subsec') * 1e9 AS INTEGER);

DROP INDEX items_claim;
CREATE INDEX items_ready ON items (priority DESC, order_at, id, next_at) WHERE state = 'pending' AND ready = 1;
CREATE INDEX items_waiting ON items (ready, next_at) WHERE state = 'pending';

-- Retention (DeleteSucceeded) reads the oldest succeeded items first
-- instead of scanning the table.
CREATE INDEX items_succeeded_updated ON items (updated_at) WHERE state = 'succeeded';
