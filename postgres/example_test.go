package postgres_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/postgres"
)

// Open a store in its own schema and apply the schema's migrations once
// per deployment (what `redrive migrate` does). Every worker process on
// every host then opens the same database without Migrate.
//
// This example needs a PostgreSQL server, so it is compiled but not run.
func ExampleOpen() {
	ctx := context.Background()
	store, err := postgres.Open(ctx, os.Getenv("DATABASE_URL"), postgres.Options{Schema: "redrive"})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	ms, err := store.MigrationStatus(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range ms {
		fmt.Printf("%04d %s applied: %v\n", m.Version, m.Name, m.Applied)
	}
}

// Enqueue work in the application's own transaction: the run and its items
// exist if and only if the transaction commits, so an order that rolled
// back never gets a notification, and one that committed never loses it.
// Workers (redrive.NewClient on the same database, in any process) are
// woken by the commit.
//
// This example needs a PostgreSQL server, so it is compiled but not run.
func ExampleStore_StartRunTx() {
	ctx := context.Background()
	store, err := postgres.Open(ctx, "postgres://app@db/app", postgres.Options{Schema: "redrive", Migrate: true})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	// Only the pipeline's name and its first stage's name are needed to
	// enqueue; the handlers live in the worker processes.
	notify := redrive.Pipeline{Name: "orders", Stages: []redrive.Stage{{Name: "notify"}}}

	tx, err := store.Pool().Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx) // a no-op once committed

	// The application's own writes.
	if _, err := tx.Exec(ctx, `INSERT INTO orders (id, customer) VALUES ($1, $2)`, 1001, "ada"); err != nil {
		log.Fatal(err)
	}
	run, enqueued, err := store.StartRunTx(ctx, tx, notify,
		[]redrive.NewItem{{Key: "order-1001", Payload: []byte(`{"order":1001}`)}},
		redrive.RunOptions{})
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("run", run.ID, "items", len(enqueued))
}
