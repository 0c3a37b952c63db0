-- 0028_failures_counted_on_completion: a completion counts the failures it
-- records by group, not one row at a time.
--
-- {schema} is replaced by the store's quoted schema name.

-- A death went through two failure-count triggers, items_failure_update
-- for the item and attempts_failure_insert for its failed attempt, each a
-- function call and a row of failure_counts: a quarter of what a death
-- cost the server (docs/BENCHMARKS.md, "Deaths fingerprinted and counted for less").
-- The store's completion now writes one row per group itself, from the
-- rows it changes and inserts, and sets redrive.failures_counted for its
-- transaction, as the bulk actions do since 0027; items_failure_update
-- already checks the setting, and attempts_failure_insert now does too.
-- The setting is checked after the fingerprint, so a succeeded attempt
-- pays nothing more. Any other statement, and every statement of a process
-- that predates this migration, is counted by the triggers as before.
DROP TRIGGER attempts_failure_insert ON {schema}.attempts;
CREATE TRIGGER attempts_failure_insert AFTER INSERT ON {schema}.attempts
    FOR EACH ROW WHEN (NEW.fingerprint IS NOT NULL
        AND current_setting('redrive.failures_counted', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION {schema}.attempts_failure_count();
