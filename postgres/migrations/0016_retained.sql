-- 0016_retained: runs keep counting the succeeded items that retention
-- deletes, as they keep counting purged ones, so that a run's total and
-- success rate are its history and do not change when old rows go.
-- Retention's delete sets redrive.counts_unchanged (see 0010_triggers), and
-- the delete trigger of run_counts now skips such a statement as the update
-- trigger does.
DROP TRIGGER items_count_delete ON {schema}.items;
CREATE TRIGGER items_count_delete AFTER DELETE ON {schema}.items
    REFERENCING OLD TABLE AS old_items FOR EACH STATEMENT
    WHEN (current_setting('redrive.counts_unchanged', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION {schema}.items_count();
