-- 0003_ops: the source of a run, purged counts, the workers table, and each
-- stage's input.
--
-- {schema} is replaced by the store's quoted schema name.

-- Where a run's items came from (RunOptions.Source and SourceHash), so that a
-- named run is only resumed with the same input.
ALTER TABLE {schema}.runs ADD COLUMN source text NOT NULL DEFAULT '';
ALTER TABLE {schema}.runs ADD COLUMN source_hash text NOT NULL DEFAULT '';

-- Purged items are counted in run_counts under the state 'purged': Purge
-- adds their number there in the statement that deletes them, whose delete
-- trigger takes them off their dead or canceled count. The sum of a run's
-- rows, its total, is therefore unchanged by a purge; a retention delete of
-- succeeded items (DeleteSucceeded) still lowers it.

-- One row per started client, refreshed every heartbeat interval and deleted
-- when the client stops; expires_at tells a live row from a crashed one.
CREATE TABLE {schema}.workers (
    owner      text PRIMARY KEY,
    host       text NOT NULL DEFAULT '',
    pid        integer NOT NULL DEFAULT 0,
    pipelines  text[] NOT NULL DEFAULT '{}',
    started_at timestamptz NOT NULL,
    last_seen  timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);

-- The input each stage after the first had: the previous stage's output,
-- kept when an item moves on so that a redrive can restart it at an earlier
-- stage. The first stage's input is items.input. A row trigger whose WHEN
-- condition is checked without calling the function keeps it, so that
-- heartbeats, retries and other updates that do not move an item on cost
-- nothing more.
CREATE TABLE {schema}.item_stage_inputs (
    item_id     bigint NOT NULL,
    stage_index integer NOT NULL,
    stage       text NOT NULL,
    payload     bytea,
    PRIMARY KEY (item_id, stage_index)
);

CREATE FUNCTION {schema}.items_stage_input() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {schema}.item_stage_inputs (item_id, stage_index, stage, payload)
    VALUES (NEW.id, NEW.stage_index, NEW.stage, NEW.payload)
    ON CONFLICT (item_id, stage_index) DO UPDATE SET stage = EXCLUDED.stage, payload = EXCLUDED.payload;
    RETURN NULL;
END
$$;

CREATE TRIGGER items_stage_input AFTER UPDATE ON {schema}.items
    FOR EACH ROW WHEN (NEW.stage_index > OLD.stage_index) EXECUTE FUNCTION {schema}.items_stage_input();

CREATE FUNCTION {schema}.items_stage_input_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM {schema}.item_stage_inputs WHERE item_id IN (SELECT id FROM old_items);
    RETURN NULL;
END
$$;

CREATE TRIGGER items_stage_input_delete AFTER DELETE ON {schema}.items
    REFERENCING OLD TABLE AS old_items FOR EACH STATEMENT EXECUTE FUNCTION {schema}.items_stage_input_delete();
