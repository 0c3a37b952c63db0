-- 0015_failure_counts: error-group counts kept as failures are written.
--
-- The console's error groups (FailureGroups) counted a million dead items
-- and a million failed attempts by grouping two indexes on every request:
-- 1.5 to 2.3 seconds. failure_counts holds those counts instead, per run,
-- pipeline, stage, class, fingerprint and kind: 'dead' and 'canceled' for
-- items in that state (grouped by the item's stage and its reason),
-- 'failed' for attempts with a stored fingerprint (every outcome but
-- succeeded).
--
-- Row triggers keep it, and their WHEN conditions are checked without
-- calling the function: an item is counted only when it enters or leaves
-- the dead or canceled state (or changes while in it, as the fingerprint
-- backfill does), an attempt only when it has a fingerprint, so the
-- success path (claim, succeed, move on) writes nothing more. As in
-- run_counts, each change is a row of its own (n is +1 or -1), never an
-- update of a shared row: the workers of an outage kill items of the same
-- few groups at once, and updating a group's row would make each wait for
-- the other's commit, or deadlock when two batches meet two groups in
-- opposite orders. The sum of a group's rows is its count; the store folds
-- the rows into one per group when a read finds many (Store.foldFailures).
--
-- {schema} is replaced by the store's quoted schema name.
CREATE TABLE {schema}.failure_counts (
    pipeline    text NOT NULL,
    stage       text NOT NULL,
    class       text NOT NULL,
    fingerprint text NOT NULL,
    run_id      bigint NOT NULL,
    kind        text NOT NULL, -- dead, canceled, failed
    n           bigint NOT NULL
);

INSERT INTO {schema}.failure_counts (pipeline, stage, class, fingerprint, run_id, kind, n)
SELECT pipeline, stage, coalesce(reason_class, ''), coalesce(reason_fingerprint, ''), run_id, state, count(*)
FROM {schema}.items WHERE state IN ('dead', 'canceled')
GROUP BY 1, 2, 3, 4, 5, 6;

INSERT INTO {schema}.failure_counts (pipeline, stage, class, fingerprint, run_id, kind, n)
SELECT pipeline, stage, class, fingerprint, run_id, 'failed', count(*)
FROM {schema}.attempts WHERE fingerprint IS NOT NULL
GROUP BY 1, 2, 3, 4, 5;

CREATE FUNCTION {schema}.items_failure_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.state IN ('dead', 'canceled') THEN
        INSERT INTO {schema}.failure_counts (pipeline, stage, class, fingerprint, run_id, kind, n)
        VALUES (OLD.pipeline, OLD.stage, coalesce(OLD.reason_class, ''), coalesce(OLD.reason_fingerprint, ''),
            OLD.run_id, OLD.state, -1);
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.state IN ('dead', 'canceled') THEN
        INSERT INTO {schema}.failure_counts (pipeline, stage, class, fingerprint, run_id, kind, n)
        VALUES (NEW.pipeline, NEW.stage, coalesce(NEW.reason_class, ''), coalesce(NEW.reason_fingerprint, ''),
            NEW.run_id, NEW.state, 1);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER items_failure_insert AFTER INSERT ON {schema}.items
    FOR EACH ROW WHEN (NEW.state IN ('dead', 'canceled')) EXECUTE FUNCTION {schema}.items_failure_count();
CREATE TRIGGER items_failure_update AFTER UPDATE ON {schema}.items
    FOR EACH ROW WHEN (OLD.state IN ('dead', 'canceled') OR NEW.state IN ('dead', 'canceled'))
    EXECUTE FUNCTION {schema}.items_failure_count();
CREATE TRIGGER items_failure_delete AFTER DELETE ON {schema}.items
    FOR EACH ROW WHEN (OLD.state IN ('dead', 'canceled')) EXECUTE FUNCTION {schema}.items_failure_count();

CREATE FUNCTION {schema}.attempts_failure_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.fingerprint IS NOT NULL THEN
        INSERT INTO {schema}.failure_counts (pipeline, stage, class, fingerprint, run_id, kind, n)
        VALUES (OLD.pipeline, OLD.stage, OLD.class, OLD.fingerprint, OLD.run_id, 'failed', -1);
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.fingerprint IS NOT NULL THEN
        INSERT INTO {schema}.failure_counts (pipeline, stage, class, fingerprint, run_id, kind, n)
        VALUES (NEW.pipeline, NEW.stage, NEW.class, NEW.fingerprint, NEW.run_id, 'failed', 1);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER attempts_failure_insert AFTER INSERT ON {schema}.attempts
    FOR EACH ROW WHEN (NEW.fingerprint IS NOT NULL) EXECUTE FUNCTION {schema}.attempts_failure_count();
CREATE TRIGGER attempts_failure_update AFTER UPDATE ON {schema}.attempts
    FOR EACH ROW WHEN (OLD.fingerprint IS NOT NULL OR NEW.fingerprint IS NOT NULL)
    EXECUTE FUNCTION {schema}.attempts_failure_count();
CREATE TRIGGER attempts_failure_delete AFTER DELETE ON {schema}.attempts
    FOR EACH ROW WHEN (OLD.fingerprint IS NOT NULL) EXECUTE FUNCTION {schema}.attempts_failure_count();

-- The examples of a group are its newest entries of items_cause (or
-- attempts_cause), read backwards. The planner multiplied the selectivity
-- of pipeline, stage, class and fingerprint as if they were independent,
-- took a group of 42,000 deaths for one of 2,000, and, with a run in the
-- filter, preferred reading and sorting every death of the group (or of the
-- run, through items_run_state): about a second per group at a million dead
-- items, 2 ms once it knows the combinations (ANALYZE gathers them).
CREATE STATISTICS {schema}.items_cause_groups (mcv) ON pipeline, stage, reason_class, reason_fingerprint
    FROM {schema}.items;
CREATE STATISTICS {schema}.attempts_cause_groups (mcv) ON pipeline, stage, class, fingerprint
    FROM {schema}.attempts;
