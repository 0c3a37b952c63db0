-- 0024_trace_context: the W3C Trace Context an item was submitted with
-- (a traceparent header, and its tracestate), so that every attempt of the
-- item, in any process and after restarts, is a span of the submitter's
-- trace. NULL for items submitted without one. Adding nullable columns
-- without defaults rewrites nothing.
--
-- {schema} is replaced by the store's quoted schema name.
ALTER TABLE {schema}.items ADD COLUMN traceparent text, ADD COLUMN tracestate text;
