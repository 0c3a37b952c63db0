package main

import (
	"context"
	"fmt"

	"github.com/redrive/redrive/storeurl"
	"github.com/spf13/cobra"
)

// newMigrateCmd returns `redrive migrate up|status`.
func newMigrateCmd() *cobra.Command {
	cmd := newGroupCmd("migrate", "Create or upgrade the database schema, or show its migrations")
	cmd.AddCommand(newMigrateUpCmd(), newMigrateStatusCmd())
	return cmd
}

// readMigrations opens the store at dbURL with o, lists its migrations and
// closes it again. Both migrate commands only need the list, and `migrate up`
// reads it twice on PostgreSQL: before and after migrating.
func readMigrations(ctx context.Context, dbURL string, o openOptions) ([]migrationRow, error) {
	s, closeFn, err := openStoreWith(ctx, dbURL, o)
	if err != nil {
		return nil, err
	}
	defer closeFn()
	return migrationStatus(ctx, s)
}

func newMigrateUpCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Apply the migrations the database lacks",
		Long: `Apply the migrations the database lacks. On SQLite the file is created when it
does not exist. On PostgreSQL the schema named by --pg-schema is created; many
processes may run this at once, each migration applies once.`,
		Args: noArgs,
	}
	asJSON := addJSONFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		c := dbConfigFrom(ctx)
		t, err := parseDBURL(c.URL)
		if err != nil {
			return err
		}
		// On PostgreSQL, look before migrating so that we can say what was
		// applied. SQLite migrates on open, so there we report the state.
		before := map[int]bool{}
		if t.Kind == storeurl.Postgres {
			ms, err := readMigrations(ctx, c.URL, openOptions{Schema: c.Schema, AllowUnmigrated: true})
			if err != nil {
				return err
			}
			for _, m := range ms {
				before[m.Version] = m.Applied
			}
		}
		ms, err := readMigrations(ctx, c.URL, openOptions{Schema: c.Schema, Migrate: true})
		if err != nil {
			return err
		}
		if *asJSON {
			return writeJSON(cmd.OutOrStdout(), ms)
		}
		applied := 0
		for _, m := range ms {
			if m.Applied && !before[m.Version] {
				applied++
			}
		}
		fmt.Fprintf(cmd.OutOrStdout(), "database %s is up to date (%d migrations)\n", redactURL(c.URL), len(ms))
		if t.Kind == storeurl.Postgres {
			fmt.Fprintf(cmd.OutOrStdout(), "applied %d migrations to schema %q\n", applied, c.Schema)
		}
		return nil
	}
	return cmd
}

func newMigrateStatusCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status",
		Short: "List the migrations and whether each is applied",
		Args:  noArgs,
	}
	asJSON := addJSONFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		ctx := cmd.Context()
		c := dbConfigFrom(ctx)
		ms, err := readMigrations(ctx, c.URL, openOptions{Schema: c.Schema, AllowUnmigrated: true, MustExist: true})
		if err != nil {
			return err
		}
		if *asJSON {
			return writeJSON(cmd.OutOrStdout(), ms)
		}
		t := newTable(cmd.OutOrStdout(), "VERSION", "NAME", "STATUS", "APPLIED AT")
		pending := 0
		for _, m := range ms {
			st := "applied"
			if !m.Applied {
				st = "pending"
				pending++
			}
			t.row(fmt.Sprintf("%04d", m.Version), m.Name, st, fmtTime(m.AppliedAt))
		}
		if err := t.flush(); err != nil {
			return err
		}
		if pending > 0 {
			fmt.Fprintf(cmd.OutOrStdout(), "%d pending: %s\n", pending, migrateFirstHint)
		}
		return nil
	}
	return cmd
}
