-- 0010_stage_input_on_attempt: each stage's input travels on the attempt that
-- moved the item on, and the run counts ignore heartbeats.
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
