-- 0011_callbacks: an item may name a callback URL that is told when it
-- ends, through the outbox, like a pipeline's webhook.
--
-- {schema} is replaced by the store's quoted schema name.

-- The URL given at submit; NULL for most items.
ALTER TABLE {schema}.items ADD COLUMN callback text;
-- The URL a notification goes to instead of its pipeline's webhook; NULL
-- for webhook notifications.
ALTER TABLE {schema}.outbox ADD COLUMN callback text;

-- An item with a callback announces its death there always, and its
-- success or cancellation when its pipeline's subscription (its webhook's
-- events) names that event: one rule for both, so that opting in to
-- item.succeeded on the webhook opts the callbacks in too. The function
-- still returns after one probe when nothing can be announced: no
-- subscription and no item of the statement with a callback.
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
            reason_error, reason_attempts, occurred_at, next_at, updated_at, callback)
        SELECT 'item.' || n.state, n.pipeline, n.run_id, n.id, n.key, n.stage, n.reason_class,
            n.reason_error, n.reason_attempts, coalesce(n.reason_at, n.updated_at), n.updated_at, n.updated_at,
            c.url
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
