-- 0010_triggers: each stage's input travels on the attempt that moved the
-- item on.

-- The input a stage after the first had was kept by a trigger (0003) as a
-- row of its own in item_stage_inputs: an extra indexed insert per stage an
-- item moved on to, which cost a move a third more. Complete already
-- inserts the completion's attempt; when the completion moves the item on,
-- that row now also carries the stage it moved to and that stage's input.
-- Rows written before this migration stay in item_stage_inputs, which
-- RedriveFrom still reads when no attempt has the input; the delete
-- trigger keeps them tidy.
ALTER TABLE attempts ADD COLUMN next_stage TEXT;
ALTER TABLE attempts ADD COLUMN next_stage_index INTEGER;
ALTER TABLE attempts ADD COLUMN next_input BLOB;

DROP TRIGGER items_stage_input;
