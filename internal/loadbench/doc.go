// Package loadbench measures how redrive treats a dependency that pushes back: a rate
// limiter that answers 429, an outage that answers 503, a server whose queue turns client
// timeouts into more load. It holds the loopback servers that count what they receive (every
// arrival and answer per 100 ms window, and every TCP connection accepted) and the scenarios
// of `redrive bench overload` and `redrive bench outage`: the engine with a handler over
// retryhttp.Transport, the YAML runner's http stage, several worker processes on PostgreSQL,
// nginx's limit_req as an upstream redrive does not control, and a naive retry loop measured
// in the same run for comparison.
package loadbench
