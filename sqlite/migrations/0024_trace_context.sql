-- 0024_trace_context: the W3C Trace Context an item was submitted with
-- (a traceparent header, and its tracestate), so that every attempt of the
-- item, in any process and after restarts, is a span of the submitter's
-- trace. NULL for items submitted without one.
ALTER TABLE items ADD COLUMN traceparent TEXT;
ALTER TABLE items ADD COLUMN tracestate TEXT;
