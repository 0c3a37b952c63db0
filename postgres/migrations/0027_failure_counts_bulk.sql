-- 0027_failure_counts_bulk: bulk actions count the failures they remove
-- by group, not one row at a time.
--
-- {schema} is replaced by the store's quoted schema name.

-- The failure-count triggers (0015) call their function once per dead or
-- canceled item and once per failed attempt that a statement changes or
-- deletes, and each call inserts a row of its own into failure_counts. A
-- purge of a million dead items spent 9.6 of its 18.9 s in them (one call
-- per item and one per attempt), a redrive of a million 7.7 of 33 s
-- (docs/BENCHMARKS.md, "Bulk actions count failures by group"). Those
-- statements now write one row per group themselves, from the rows they
-- delete or change, and say so by setting redrive.failures_counted to
-- 'on' for their transaction; the WHEN conditions below then skip the
-- function. The setting is checked after the state condition, so the
-- claims and completions that touch no dead item pay nothing more. Any
-- other statement, and every statement of a process that predates this
-- migration, is counted by the triggers as before; a process that finds
-- this migration unapplied does not set the setting.
DROP TRIGGER items_failure_update ON {schema}.items;
CREATE TRIGGER items_failure_update AFTER UPDATE ON {schema}.items
    FOR EACH ROW WHEN ((OLD.state IN ('dead', 'canceled') OR NEW.state IN ('dead', 'canceled'))
        AND current_setting('redrive.failures_counted', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION {schema}.items_failure_count();
DROP TRIGGER items_failure_delete ON {schema}.items;
CREATE TRIGGER items_failure_delete AFTER DELETE ON {schema}.items
    FOR EACH ROW WHEN (OLD.state IN ('dead', 'canceled')
        AND current_setting('redrive.failures_counted', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION {schema}.items_failure_count();
DROP TRIGGER attempts_failure_delete ON {schema}.attempts;
CREATE TRIGGER attempts_failure_delete AFTER DELETE ON {schema}.attempts
    FOR EACH ROW WHEN (OLD.fingerprint IS NOT NULL
        AND current_setting('redrive.failures_counted', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION {schema}.attempts_failure_count();
