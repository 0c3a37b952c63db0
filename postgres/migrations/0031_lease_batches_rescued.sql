-- 0031_lease_batches_rescued: leases that a rescue dropped from the ledger
-- are recorded again, and no batch's count is trusted.
--
-- {schema} is replaced by the store's quoted schema name.

-- Before this build, a rescue (ClaimExpired) that locked an item whose
-- lease a heartbeat had renewed after the rescue's snapshot could not
-- update it, and still dropped the lease from its batch. Such a lease is
-- in no batch: once its worker is gone, no rescuer can take it over. And
-- its completion or release counted it off the batch that had dropped it,
-- so that batch's count may be low: a batch that expires counted at zero
-- is deleted without its items being read, which drops the leases it does
-- hold. Every batch's count is dropped (NULL: its items are read when it
-- expires, once), and the leases held in no batch are recorded in one
-- uncounted batch with their own tokens, as 0029 recorded the leases it
-- found. Items are read once, whole; nothing is locked but the batches.
UPDATE {schema}.lease_batches SET held = NULL WHERE held IS NOT NULL;

INSERT INTO {schema}.lease_batches (id, expires_at, ids, tokens, held, pipelines)
SELECT nextval('{schema}.lease_batches_id_seq'), min(i.lease_expires_at), array_agg(i.id ORDER BY i.id),
    array_agg(i.lease_token ORDER BY i.id), NULL, array_agg(DISTINCT i.pipeline)
FROM {schema}.items i
WHERE i.state = 'pending' AND i.lease_expires_at IS NOT NULL AND i.lease_token % 2 = 1
    AND NOT EXISTS (SELECT 1 FROM {schema}.lease_batches b,
            unnest(b.ids, coalesce(b.tokens, array_fill(2 * b.id + 1, ARRAY[cardinality(b.ids)]))) AS u(id, token)
        WHERE u.id = i.id AND u.token = i.lease_token)
HAVING count(*) > 0;
