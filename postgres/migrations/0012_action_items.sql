-- 0012_action_items: which items each audited action changed.
--
-- {schema} is replaced by the store's quoted schema name.

-- One row per item and action (a redrive, a cancel, a retry now), written
-- from the action's filter before it runs, so that an item's page can say
-- "redriven by ops at ...". Keyed by item first: the item page reads one
-- item's marks, and the statements that delete items (purge, retention)
-- delete their marks through the same index, as they delete their
-- attempts. No foreign keys: one to items would take a key-share lock on
-- every marked item, which made marking 100,000 items cost three times the
-- cancel it marked (docs/BENCHMARKS.md); audit_log rows are never deleted.
CREATE TABLE {schema}.action_items (
    item_id   bigint NOT NULL,
    action_id bigint NOT NULL,
    PRIMARY KEY (item_id, action_id)
);
