-- 0021_outbox_output: an item.succeeded notification carries the item's
-- output, copied in the transaction that finished the item, so that a
-- receiver needs no read of the API and every delivery sends the same body.

-- output is the item's output when at most 65536 bytes
-- (redrive.MaxNotificationOutput), else NULL; output_size is its size in
-- either case. Both are NULL for other events and for rows written before
-- this migration.
ALTER TABLE outbox ADD COLUMN output BLOB;
ALTER TABLE outbox ADD COLUMN output_size INTEGER;

-- The triggers of 0009 and 0011 again, writing the two columns for
-- item.succeeded. CAST makes length() count bytes should a payload ever be
-- stored as text.
DROP TRIGGER items_outbox_update;
CREATE TRIGGER items_outbox_update AFTER UPDATE OF state ON items
WHEN NEW.state IN ('dead', 'succeeded', 'canceled') AND OLD.state <> NEW.state
BEGIN
	INSERT INTO outbox (delivery_id, event, pipeline, run_id, item_id, item_key, stage, reason_class,
		reason_error, reason_attempts, occurred_at, next_at, updated_at, output, output_size)
	SELECT lower(hex(randomblob(16))), 'item.' || NEW.state, NEW.pipeline, NEW.run_id, NEW.id, NEW.key,
		NEW.stage, NEW.reason_class, NEW.reason_error, NEW.reason_attempts,
		COALESCE(NEW.reason_at, NEW.updated_at), NEW.updated_at, NEW.updated_at,
		CASE WHEN NEW.state = 'succeeded' AND COALESCE(length(CAST(NEW.payload AS BLOB)), 0) <= 65536
			THEN COALESCE(CAST(NEW.payload AS BLOB), X'') END,
		CASE WHEN NEW.state = 'succeeded' THEN COALESCE(length(CAST(NEW.payload AS BLOB)), 0) END
	FROM outbox_subscriptions s
	WHERE s.pipeline = NEW.pipeline AND instr(s.events, ',item.' || NEW.state || ',') > 0;
END;

DROP TRIGGER items_callback_update;
CREATE TRIGGER items_callback_update AFTER UPDATE OF state ON items
WHEN NEW.callback IS NOT NULL AND NEW.state IN ('dead', 'succeeded', 'canceled') AND OLD.state <> NEW.state
BEGIN
	INSERT INTO outbox (delivery_id, event, pipeline, run_id, item_id, item_key, stage, reason_class,
		reason_error, reason_attempts, occurred_at, next_at, updated_at, callback, output, output_size)
	SELECT lower(hex(randomblob(16))), 'item.' || NEW.state, NEW.pipeline, NEW.run_id, NEW.id, NEW.key,
		NEW.stage, NEW.reason_class, NEW.reason_error, NEW.reason_attempts,
		COALESCE(NEW.reason_at, NEW.updated_at), NEW.updated_at, NEW.updated_at, NEW.callback,
		CASE WHEN NEW.state = 'succeeded' AND COALESCE(length(CAST(NEW.payload AS BLOB)), 0) <= 65536
			THEN COALESCE(CAST(NEW.payload AS BLOB), X'') END,
		CASE WHEN NEW.state = 'succeeded' THEN COALESCE(length(CAST(NEW.payload AS BLOB)), 0) END
	WHERE NEW.state = 'dead' OR EXISTS (SELECT 1 FROM outbox_subscriptions s
		WHERE s.pipeline = NEW.pipeline AND instr(s.events, ',item.' || NEW.state || ',') > 0);
END;
