-- 0026_outbox_delivered: the outbox's retention walks the delivered
-- notifications in delivery order.
--
-- {schema} is replaced by the store's quoted schema name.

-- DeleteDelivered took each batch as the first delivered notifications in
-- ID order, found through outbox_status and sorted: after the VACUUM of a
-- drained outbox (its usual state wherever vacuum runs), whose statistics
-- say it is empty, every batch read and sorted all the delivered
-- notifications, 31 ms per batch of 2,000 behind 200,000 of them against
-- 4.5 ms analyzed, a pass that grew with the square of what it had to
-- delete (docs/engine.md, "PostgreSQL over the long haul"). A delivered
-- notification's updated_at is when it was delivered, the retention's
-- cutoff: this index holds exactly what retention reads, in the order it
-- reads it, whatever the statistics say, at one index entry per delivery.
CREATE INDEX outbox_delivered ON {schema}.outbox (updated_at) WHERE status = 'delivered';
