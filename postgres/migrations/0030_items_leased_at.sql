-- 0030_items_leased_at: when an item's current lease began.
--
-- {schema} is replaced by the store's quoted schema name.

-- Since 0029 a claim leaves updated_at alone (it is in items_succeeded_updated's
-- key, and a claim that changed it would enter every index again). A running
-- item still reports as updated when its lease began, as a claim on SQLite
-- records it: claims and take-overs set leased_at, which no index holds, and
-- readers report the later of updated_at and leased_at for a running item. The
-- later, not leased_at alone: a process of the build before this column leaves
-- an older leased_at behind when it claims, and a lease never begins before the
-- item became pending. NULL until an item's first lease; adding the column
-- rewrites nothing.
ALTER TABLE {schema}.items ADD COLUMN leased_at timestamptz;
