// Package bench holds the measurements behind `redrive bench`: the no-op
// pipeline and the limits it is compared with (the audited bare loop, COPY,
// River outside the repository), repeated rounds on one store, the insert
// against COPY, claims beside a waiting backlog, the real shape and
// enqueue-to-start. Each measurement is a function that takes an open store
// and returns a result that the command prints or writes as JSON; the
// command (cmd/redrive/bench.go) parses flags and opens the store.
package bench
