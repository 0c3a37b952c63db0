package redrive

import "time"

// RequestKey binds a client's idempotency key (the Idempotency-Key header of
// a submit) to the request it first came with, so that a retry of that
// request is told from a new request that reuses the key: the retry repeats
// the request and has its hash; another request with the key has another
// hash and is refused instead of being taken for a retry and dropped.
type RequestKey struct {
	// Key is the client's key, unique in the store. Required.
	Key string
	// Hash identifies the request: a digest of what it asks for (its
	// endpoint, pipeline, run and items). Required.
	Hash string
	// RunID is the run the request submitted to. The key is deleted with
	// the run (by retention), since a retry finds its items through the
	// run's keys. Required.
	RunID int64
	// CreatedAt is when the key was first bound.
	CreatedAt time.Time
}
