// Package postgres is a [redrive.Store] on PostgreSQL, for many worker
// processes on many hosts sharing one database.
//
// Open connects with a pgx pool; Store.Migrate (or Options.Migrate) creates
// the tables in their own schema (default "redrive") from embedded,
// versioned migrations. Claims use FOR UPDATE SKIP LOCKED so workers do not
// block one another, completions are applied in batches with one statement
// per batch, and Enqueue and Redrive send a NOTIFY so that idle workers in
// other processes wake at once (Store implements [redrive.Notifier]).
//
// EnqueueTx and CreateRunTx take the caller's transaction, so items exist
// if and only if that transaction commits.
//
// The store uses pgx's statement cache. Behind a transaction-mode
// connection pooler (PgBouncer) add default_query_exec_mode=exec to the
// URL.
package postgres
