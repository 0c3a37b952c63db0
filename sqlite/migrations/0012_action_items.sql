-- 0012_action_items: which items each audited action changed.

-- One row per item and action (a redrive, a cancel, a retry now), written
-- from the action's filter before it runs, so that an item's page can say
-- "redriven by ops at ...". Keyed by item first: the item page reads one
-- item's marks, and deleting an item deletes its marks through the
-- trigger below with one index probe.
CREATE TABLE action_items (
	item_id   INTEGER NOT NULL,
	action_id INTEGER NOT NULL,
	PRIMARY KEY (item_id, action_id)
) WITHOUT ROWID;

-- Item IDs can be reused after the newest items are deleted, so marks go
-- with their item rather than waiting to be attached to a new one.
CREATE TRIGGER action_items_item_deleted AFTER DELETE ON items
BEGIN
	DELETE FROM action_items WHERE item_id = old.id;
END;
