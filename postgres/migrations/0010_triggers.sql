-- 0010_triggers: each stage's input travels on the attempt that moved the
-- item on, and the run counts ignore heartbeats.
--
-- {schema} is replaced by the store's quoted schema name.

-- The input a stage after the first had was kept by a row trigger (0003) as
-- a row of its own in item_stage_inputs: an extra indexed upsert per stage
-- an item moved on to, which tripled the cost of moving a batch on.
-- Complete already inserts the completion's attempt; when the completion
-- moves the item on, that row now also carries the stage it moved to and
-- that stage's input, at the cost of the payload's bytes. Rows written
-- before this migration stay in item_stage_inputs, which RedriveFrom still
-- reads when no attempt has the input; the delete trigger keeps them tidy.
ALTER TABLE {schema}.attempts ADD COLUMN next_stage text;
ALTER TABLE {schema}.attempts ADD COLUMN next_stage_index integer;
ALTER TABLE {schema}.attempts ADD COLUMN next_input bytea;

DROP TRIGGER items_stage_input ON {schema}.items;
DROP FUNCTION {schema}.items_stage_input();

-- The update trigger of run_counts ran on every UPDATE of items, heartbeats
-- included, though a heartbeat only extends leases: its function grouped the
-- old and new rows to find no change. PostgreSQL refuses a column list
-- (UPDATE OF state, run_id) on a trigger with transition tables, and a
-- statement-level WHEN cannot read rows; so a statement that cannot change
-- any count says so by setting redrive.counts_unchanged to 'on' for its
-- transaction (set_config(..., true)), and the trigger's WHEN skips the
-- function for it. Any other statement is counted as before.
DROP TRIGGER items_count_update ON {schema}.items;
CREATE TRIGGER items_count_update AFTER UPDATE ON {schema}.items
    REFERENCING OLD TABLE AS old_items NEW TABLE AS new_items FOR EACH STATEMENT
    WHEN (current_setting('redrive.counts_unchanged', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION {schema}.items_count();
