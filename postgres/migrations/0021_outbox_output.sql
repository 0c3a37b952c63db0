-- 0021_outbox_output: an item.succeeded notification carries the item's
-- output, copied in the transaction that finished the item, so that a
-- receiver needs no read of the API and every delivery sends the same body.
--
-- {schema} is replaced by the store's quoted schema name.

-- output is the item's output when at most 65536 bytes
-- (redrive.MaxNotificationOutput), else NULL; output_size is its size in
-- either case. Both are NULL for other events and for rows written before
-- this migration.
ALTER TABLE {schema}.outbox ADD COLUMN output bytea;
ALTER TABLE {schema}.outbox ADD COLUMN output_size integer;

-- The function of 0011 again, writing the two columns for item.succeeded
-- (inserted items are only ever dead, so the INSERT branch is unchanged).
CREATE OR REPLACE FUNCTION {schema}.items_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM {schema}.outbox_subscriptions)
        AND NOT EXISTS (SELECT 1 FROM new_items WHERE callback IS NOT NULL
            AND state IN ('dead', 'succeeded', 'canceled')) THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' THEN
        INSERT INTO {schema}.outbox (event, pipeline, run_id, item_id, item_key, stage, reason_class,
            reason_error, reason_attempts, occurred_at, next_at, updated_at, callback)
        SELECT 'item.' || n.state, n.pipeline, n.run_id, n.id, n.key, n.stage, n.reason_class,
            n.reason_error, n.reason_attempts, coalesce(n.reason_at, n.updated_at), n.updated_at, n.updated_at,
            c.url
        FROM new_items n
            CROSS JOIN LATERAL (SELECT NULL::text UNION ALL SELECT n.callback WHERE n.callback IS NOT NULL) AS c(url)
        WHERE n.state = 'dead'
            AND CASE WHEN c.url IS NULL
                THEN EXISTS (SELECT 1 FROM {schema}.outbox_subscriptions s
                    WHERE s.pipeline = n.pipeline AND 'item.dead' = ANY (s.events))
                ELSE true END
        ORDER BY n.id, c.url NULLS FIRST;
    ELSE
        INSERT INTO {schema}.outbox (event, pipeline, run_id, item_id, item_key, stage, reason_class,
            reason_error, reason_attempts, occurred_at, next_at, updated_at, callback, output, output_size)
        SELECT 'item.' || n.state, n.pipeline, n.run_id, n.id, n.key, n.stage, n.reason_class,
            n.reason_error, n.reason_attempts, coalesce(n.reason_at, n.updated_at), n.updated_at, n.updated_at,
            c.url,
            CASE WHEN n.state = 'succeeded' AND coalesce(octet_length(n.payload), 0) <= 65536
                THEN coalesce(n.payload, ''::bytea) END,
            CASE WHEN n.state = 'succeeded' THEN coalesce(octet_length(n.payload), 0) END
        FROM new_items n JOIN old_items o ON o.id = n.id
            CROSS JOIN LATERAL (SELECT NULL::text UNION ALL SELECT n.callback WHERE n.callback IS NOT NULL) AS c(url)
        WHERE n.state IN ('dead', 'succeeded', 'canceled') AND o.state <> n.state
            AND CASE WHEN c.url IS NULL OR n.state <> 'dead'
                THEN EXISTS (SELECT 1 FROM {schema}.outbox_subscriptions s
                    WHERE s.pipeline = n.pipeline AND 'item.' || n.state = ANY (s.events))
                ELSE true END
        ORDER BY n.id, c.url NULLS FIRST;
    END IF;
    RETURN NULL;
END
$$;
