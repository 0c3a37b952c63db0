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
CREATE TABLE {schema}.request_keys (
    key        text        NOT NULL PRIMARY KEY,
    hash       text        NOT NULL,
    run_id     bigint      NOT NULL REFERENCES {schema}.runs (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL
);
CREATE INDEX request_keys_run ON {schema}.request_keys (run_id);
