-- 0029_leases_held_pending: a claim changes no indexed column of items,
-- so that PostgreSQL writes its new row version beside the old one (a
-- heap-only update) and enters no index; the claims' leases are found
-- again through a ledger of claims.
--
-- {schema} is replaced by the store's quoted schema name.

-- A claim used to set state to 'running' and lease_expires_at, each in an
-- index key or a partial index's predicate, so every claim entered the
-- item anew in items_pkey, items_run_state and items_lease. A leased item
-- now keeps state 'pending': its lease (lease_expires_at set) alone marks
-- it running, and every reader of the store reads it so. The claim leaves
-- updated_at to the way out of the lease. items_lease goes, and with it
-- the only index whose key a claim or a heartbeat changed.
--
-- The rescuer found expired leases through items_lease. Each claim now
-- records its leases in one row of lease_batches instead: the claim's
-- expiry, its items' IDs and how many of its leases are still held. A
-- claim's tokens are 2 * batch + 1, so the statements that end a lease
-- (completions, releases) count it off its batch from the token alone,
-- and the rescuer deletes the batches left with none held without reading
-- their items; a batch still holding leases when it expires has its items
-- read, the expired ones taken over, the rest kept under their earliest
-- expiry. held NULL means not counted: every item is read. A rescuer
-- reads the batches of the pipelines it serves (pipelines, the claim's).
CREATE SEQUENCE {schema}.lease_batches_id_seq;
CREATE TABLE {schema}.lease_batches (
    id         bigint PRIMARY KEY,
    expires_at timestamptz NOT NULL,
    ids        bigint[] NOT NULL,
    tokens     bigint[],
    held       integer,
    pipelines  text[] NOT NULL
);
-- The IDs are read whole and rarely; compressing them cost each claim
-- more than storing them did.
ALTER TABLE {schema}.lease_batches ALTER COLUMN ids SET STORAGE EXTERNAL;
ALTER TABLE {schema}.lease_batches ALTER COLUMN tokens SET STORAGE EXTERNAL;
CREATE INDEX lease_batches_expires ON {schema}.lease_batches (expires_at);

-- A batch's tokens must exceed every token an item holds or held, so that
-- no new lease's token equals an old one's.
SELECT setval('{schema}.lease_batches_id_seq', greatest(1, (SELECT max(lease_token) FROM {schema}.items) / 2 + 1));

-- Run counts count a leased pending item as running.
CREATE OR REPLACE FUNCTION {schema}.items_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO {schema}.run_counts (run_id, state, n)
        SELECT run_id, CASE WHEN state = 'pending' AND lease_expires_at IS NOT NULL THEN 'running' ELSE state END,
            count(*) FROM new_items GROUP BY 1, 2;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO {schema}.run_counts (run_id, state, n)
        SELECT run_id, CASE WHEN state = 'pending' AND lease_expires_at IS NOT NULL THEN 'running' ELSE state END,
            -count(*) FROM old_items GROUP BY 1, 2;
    ELSE
        INSERT INTO {schema}.run_counts (run_id, state, n)
        SELECT run_id, state, sum(n) FROM (
            SELECT run_id, CASE WHEN state = 'pending' AND lease_expires_at IS NOT NULL THEN 'running' ELSE state END AS state,
                count(*) AS n FROM new_items GROUP BY 1, 2
            UNION ALL
            SELECT run_id, CASE WHEN state = 'pending' AND lease_expires_at IS NOT NULL THEN 'running' ELSE state END,
                -count(*) FROM old_items GROUP BY 1, 2) d
        GROUP BY run_id, state HAVING sum(n) <> 0;
    END IF;
    RETURN NULL;
END
$$;

-- The items running now keep their leases and tokens as pending items,
-- recorded in one uncounted batch; the rewrite changes no run's count.
INSERT INTO {schema}.lease_batches (id, expires_at, ids, tokens, held, pipelines)
SELECT nextval('{schema}.lease_batches_id_seq'), min(lease_expires_at), array_agg(id ORDER BY id),
    array_agg(lease_token ORDER BY id), NULL, array_agg(DISTINCT pipeline)
FROM {schema}.items WHERE state = 'running' HAVING count(*) > 0;
UPDATE {schema}.items SET state = 'pending' WHERE state = 'running';

-- A process older than this migration would claim with state 'running',
-- and take items leased as pending again: its claims now fail instead.
ALTER TABLE {schema}.items ADD CONSTRAINT items_no_running_state CHECK (state <> 'running') NOT VALID;

DROP INDEX {schema}.items_lease;

-- Room on each page for a claim's new row version beside the old: rows
-- written from now on fill half a page.
ALTER TABLE {schema}.items SET (fillfactor = 50);
