-- 0012_action_items: which items each audited action changed.
--
-- {schema} is replaced by the store's quoted schema name.

-- One row per item and action (a redrive, a cancel, a retry now), written
-- from the action's filter before it runs, so that an item's page can say
-- "redriven by ops at ...". Keyed by item first: the item page reads one
-- item's marks, and deleting an item cascades to its marks through the
-- same index. No foreign key to audit_log: its rows are never deleted.
CREATE TABLE {schema}.action_items (
    item_id   bigint NOT NULL REFERENCES {schema}.items (id) ON DELETE CASCADE,
    action_id bigint NOT NULL,
    PRIMARY KEY (item_id, action_id)
);
