-- 0017_waiting_only: items_waiting holds the items waiting on a backoff
-- and no longer every ready item, so that enqueueing an item writes one
-- index entry fewer.
--
-- The ready half of items_waiting served one reading, OldestDue's oldest
-- ready item, and cost every new item an entry. OldestDue now reads the
-- ready items through items_ready instead (internal/readywalk): within a
-- priority that index is in order time order, and a ready item is due no
-- earlier than its order time except when its OrderAt lies ahead of its
-- due time; so a walk in claim order can stop at the first item ordered
-- after the oldest due time found so far. The exceptions are few (an
-- OrderAt set in the future) and are kept in items_ready_early, which
-- holds only them.

DROP INDEX items_waiting;
CREATE INDEX items_waiting ON items (next_at) WHERE state = 'pending' AND ready = 0;
CREATE INDEX items_ready_early ON items (next_at) WHERE state = 'pending' AND ready = 1 AND next_at < order_at;
