-- 0025_outbox_skip: the outbox's update trigger skips statements that
-- cannot announce anything.
--
-- {schema} is replaced by the store's quoted schema name.

-- items_outbox (0021) only writes for an item that reached dead,
-- succeeded or canceled from another state, yet it ran for every UPDATE of
-- items: each claim (pending to running), promotion of waiting items,
-- heartbeat, start mark and release read the statement's new rows looking
-- for a callback, about 2 µs of the server's CPU per item claimed
-- (docs/BENCHMARKS.md, "Cuts of issue 21"). As for run_counts (0010), a
-- statement-level WHEN cannot read rows, so the statements that move no
-- item to a final state say so by setting redrive.outbox_unchanged to 'on'
-- for their transaction, and the WHEN skips the function for them. Any
-- other statement, and every statement of a process that predates this
-- migration, runs it as before.
DROP TRIGGER items_outbox_update ON {schema}.items;
CREATE TRIGGER items_outbox_update AFTER UPDATE ON {schema}.items
    REFERENCING OLD TABLE AS old_items NEW TABLE AS new_items FOR EACH STATEMENT
    WHEN (current_setting('redrive.outbox_unchanged', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION {schema}.items_outbox();
