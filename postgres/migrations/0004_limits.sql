-- 0004_limits: rate limits shared by every worker process of the deployment.
-- One pace per dependency: the theoretical arrival time of its next call
-- (GCRA), and its gate (a Retry-After for everybody).
--
-- {schema} is replaced by the store's quoted schema name.

CREATE TABLE {schema}.limits (
    name       text PRIMARY KEY,
    tat        timestamptz,
    gate_until timestamptz
);
