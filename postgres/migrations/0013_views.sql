-- 0013_views: what the operators' console charts and shows.
--
-- {schema} is replaced by the store's quoted schema name.

-- The attempts of a time range by stage and outcome, for the timeline
-- charts: a range scan of this index answers the count without reading the
-- table (it covers every column the query reads). It costs each recorded
-- attempt one more index entry; see docs/BENCHMARKS.md.
CREATE INDEX attempts_timeline ON {schema}.attempts (finished_at, pipeline, stage, outcome, run_id);

-- Why an operator paused a stage, for the others.
ALTER TABLE {schema}.paused_stages ADD COLUMN reason text NOT NULL DEFAULT '';
