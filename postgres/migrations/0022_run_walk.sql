-- 0022_run_walk: items_run_state orders each run's items of a state by ID,
-- so that ListItems reads a run a page at a time by walking it from the
-- cursor (Store.runWalkSQL) instead of walking items_pkey past the run's
-- end, through every later run's items, or sorting the whole run.
--
-- {schema} is replaced by the store's quoted schema name.

-- The same number of indexes as before: the per-run filters that used
-- (run_id, state) use its first two columns.
DROP INDEX {schema}.items_run_state;
CREATE INDEX items_run_state ON {schema}.items (run_id, state, id);
