-- 0026_outbox_delivered: the outbox's retention walks the delivered
-- notifications in delivery order.

-- DeleteDelivered took each batch as the first delivered notifications in
-- ID order, found through outbox_status and sorted: every batch read and
-- sorted all the delivered notifications, 18.5 ms per batch of 2,000
-- behind 50,000 of them and 51 ms behind 200,000, a pass that grew with
-- the square of what it had to delete. A delivered notification's
-- updated_at is when it was delivered, the retention's cutoff: this index
-- holds exactly what retention reads, in the order it reads it, at one
-- index entry per delivery.
CREATE INDEX outbox_delivered ON outbox (updated_at) WHERE status = 'delivered';
