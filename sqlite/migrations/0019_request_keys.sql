-- 0019_request_keys: an Idempotency-Key is bound to the request it first
-- came with.
--
-- A submit's Idempotency-Key used to live only in the keys it gave the
-- request's items (<key>#<index>): a request that reused the key with other
-- items found those keys taken and was answered as a retry while its own
-- items were dropped. request_keys keeps, per key, a hash of the request
-- (endpoint, pipeline, run and items), so that such a request is refused,
-- and the run it submitted to: a key goes when its run is deleted, as the
-- item keys a retry would find do.
CREATE TABLE request_keys (
	key        TEXT    NOT NULL PRIMARY KEY,
	hash       TEXT    NOT NULL,
	run_id     INTEGER NOT NULL,
	created_at INTEGER NOT NULL
);
CREATE INDEX request_keys_run ON request_keys (run_id);

CREATE TRIGGER runs_request_keys AFTER DELETE ON runs
BEGIN
	DELETE FROM request_keys WHERE run_id = OLD.id;
END;
