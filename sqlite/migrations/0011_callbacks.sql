-- 0011_callbacks: an item may name a callback URL that is told when it
-- ends, through the outbox, like a pipeline's webhook.

-- The URL given at submit; NULL for most items.
ALTER TABLE items ADD COLUMN callback TEXT;
-- The URL a notification goes to instead of its pipeline's webhook; NULL
-- for webhook notifications.
ALTER TABLE outbox ADD COLUMN callback TEXT;

-- An item with a callback announces its death there always, and its
-- success or cancellation when its pipeline's subscription (its webhook's
-- events) names that event: one rule for both, so that opting in to
-- item.succeeded on the webhook opts the callbacks in too. The row is
-- written in the transaction that changed the item, as for webhooks.
CREATE TRIGGER items_callback_update AFTER UPDATE OF state ON items
WHEN NEW.callback IS NOT NULL AND NEW.state IN ('dead', 'succeeded', 'canceled') AND OLD.state <> NEW.state
BEGIN
	INSERT INTO outbox (delivery_id, event, pipeline, run_id, item_id, item_key, stage, reason_class,
		reason_error, reason_attempts, occurred_at, next_at, updated_at, callback)
	SELECT lower(hex(randomblob(16))), 'item.' || NEW.state, NEW.pipeline, NEW.run_id, NEW.id, NEW.key,
		NEW.stage, NEW.reason_class, NEW.reason_error, NEW.reason_attempts,
		COALESCE(NEW.reason_at, NEW.updated_at), NEW.updated_at, NEW.updated_at, NEW.callback
	WHERE NEW.state = 'dead' OR EXISTS (SELECT 1 FROM outbox_subscriptions s
		WHERE s.pipeline = NEW.pipeline AND instr(s.events, ',item.' || NEW.state || ',') > 0);
END;

CREATE TRIGGER items_callback_insert AFTER INSERT ON items
WHEN NEW.callback IS NOT NULL AND NEW.state = 'dead'
BEGIN
	INSERT INTO outbox (delivery_id, event, pipeline, run_id, item_id, item_key, stage, reason_class,
		reason_error, reason_attempts, occurred_at, next_at, updated_at, callback)
	VALUES (lower(hex(randomblob(16))), 'item.dead', NEW.pipeline, NEW.run_id, NEW.id, NEW.key,
		NEW.stage, NEW.reason_class, NEW.reason_error, NEW.reason_attempts,
		COALESCE(NEW.reason_at, NEW.updated_at), NEW.updated_at, NEW.updated_at, NEW.callback);
END;
