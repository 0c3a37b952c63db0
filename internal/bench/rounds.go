package bench

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/postgres"
)

// RoundsResult is what `redrive bench --rounds N` measured: the no-op
// benchmark repeated on one store whose succeeded items retention deletes
// as they finish, so that the last round runs on a store that has worked
// N × --items items. A non-nil progress is told of each round as it ends.
type RoundsResult struct {
	Rounds    []Result `json:"rounds"`
	Processed int      `json:"items_processed"`
	// Sizes is the database's size in bytes after each round (see dbSize).
	Sizes []int64 `json:"db_bytes"`
	// Held is how many succeeded items the store still held after each
	// round: retention's backlog, which stays small while it keeps pace.
	Held []int `json:"succeeded_held"`
	// Relations is, on PostgreSQL, the size of each table, index and
	// TOAST table of the schema after each round, largest first: where
	// the database grows.
	Relations [][]RelationSize `json:"relations,omitempty"`
	// Ratio is the last round's work rate over the first round's.
	Ratio float64 `json:"last_over_first"`
	// CPURatio is the last round's CPU time per item worked, this
	// process's and the server backends' serving it together, over the
	// first round's: what working an item costs on the aged store against
	// the new one, apart from how much CPU the machine gave each round.
	// 0 where the CPU time could not be read.
	CPURatio float64 `json:"cpu_per_item_last_over_first,omitempty"`
}

// Rounds works items no-op items (see Noop) rounds times on store, whose
// succeeded items retention deletes as they finish (Config.Retention 1 ns,
// checked every second), and measures each round, the database's size
// after it (in PostgreSQL schema schema) and the succeeded items still
// held. A non-nil progress is told of each round as it ends.
func Rounds(ctx context.Context, store redrive.Store, schema string, progress io.Writer, rounds, items, stages, workers, batch int) (RoundsResult, error) {
	var rs RoundsResult
	for range rounds {
		r, err := Noop(ctx, store, schema, items, stages, workers, batch, time.Nanosecond, nil)
		if err != nil {
			return rs, err
		}
		rs.Rounds = append(rs.Rounds, r)
		rs.Processed += items
		size, err := dbSize(ctx, store, schema)
		if err != nil {
			return rs, err
		}
		rs.Sizes = append(rs.Sizes, size)
		held, err := store.Count(ctx, redrive.ItemFilter{States: []redrive.State{redrive.StateSucceeded}})
		if err != nil {
			return rs, err
		}
		rs.Held = append(rs.Held, held)
		rels, err := relationSizes(ctx, store, schema)
		if err != nil {
			return rs, err
		}
		if rels != nil {
			rs.Relations = append(rs.Relations, rels)
		}
		if progress != nil {
			printRound(progress, len(rs.Rounds)-1, r, size, held)
			printRelations(progress, rels)
		}
	}
	first, last := rs.Rounds[0].Engine, rs.Rounds[len(rs.Rounds)-1].Engine
	rs.Ratio = rs.Rounds[len(rs.Rounds)-1].ItemsPerSecond / rs.Rounds[0].ItemsPerSecond
	if c := first.ProcessCPU + first.ServerCPU; c > 0 {
		rs.CPURatio = (last.ProcessCPU + last.ServerCPU) / c
	}
	return rs, nil
}

// PrintRounds writes rs, measured on store, as `redrive bench --rounds`
// prints it.
func PrintRounds(w io.Writer, store string, rs RoundsResult) {
	fmt.Fprintf(w, "store              %s\n", store)
	for i, r := range rs.Rounds {
		printRound(w, i, r, rs.Sizes[i], rs.Held[i])
		if i < len(rs.Relations) {
			printRelations(w, rs.Relations[i])
		}
	}
	fmt.Fprintf(w, "processed          %d items; last round / first round: %.2f", rs.Processed, rs.Ratio)
	if rs.CPURatio > 0 {
		fmt.Fprintf(w, "; CPU per item, last / first: %.2f", rs.CPURatio)
	}
	fmt.Fprintln(w)
}

func printRound(w io.Writer, i int, r Result, size int64, held int) {
	fmt.Fprintf(w, "round %-3d          insert %.0f items/s  work %.0f items/s  %.0f stage completions/s  database %.1f MB  succeeded held %d  µs CPU per item %.1f here",
		i+1, r.InsertPerSecond, r.ItemsPerSecond, r.StageCompletionsPS, float64(size)/1e6, held, r.Engine.ProcessCPU)
	if r.Engine.ServerCPU > 0 {
		// SQLite has no server: its work is all in the process.
		fmt.Fprintf(w, " + %.1f server", r.Engine.ServerCPU)
	}
	fmt.Fprintln(w)
}

// RelationSize is the size of one relation of a PostgreSQL schema: its
// main fork (pg_relation_size), without its free space and visibility
// maps; for a TOAST table, with its index.
type RelationSize struct {
	Name string `json:"name"`
	// Kind is "table", "index" or "toast".
	Kind  string `json:"kind"`
	Bytes int64  `json:"bytes"`
	// DeadRows is, for a table, the dead row versions PostgreSQL's
	// statistics count (pg_stat_user_tables.n_dead_tup, as of the last
	// report of the backends, so approximate).
	DeadRows int64 `json:"dead_rows,omitempty"`
}

// relationSizes reads the size of every relation of schema larger than
// zero, largest first; nil for a store other than PostgreSQL.
func relationSizes(ctx context.Context, store redrive.Store, schema string) ([]RelationSize, error) {
	pg, ok := store.(*postgres.Store)
	if !ok {
		return nil, nil
	}
	rows, err := pg.Pool().Query(ctx, `SELECT name, kind, bytes, dead FROM (
		SELECT c.relname::text AS name, CASE c.relkind WHEN 'i' THEN 'index' ELSE 'table' END AS kind,
			pg_relation_size(c.oid) AS bytes, coalesce(s.n_dead_tup, 0) AS dead
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
		WHERE n.nspname = $1 AND c.relkind IN ('r', 'i')
		UNION ALL
		SELECT c.relname::text, 'toast', pg_total_relation_size(c.reltoastrelid), 0
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind = 'r' AND c.reltoastrelid <> 0) r
		WHERE bytes > 0 ORDER BY bytes DESC, name`, schema)
	if err != nil {
		return nil, fmt.Errorf("bench: relation sizes: %w", err)
	}
	defer rows.Close()
	var out []RelationSize
	for rows.Next() {
		var r RelationSize
		if err := rows.Scan(&r.Name, &r.Kind, &r.Bytes, &r.DeadRows); err != nil {
			return nil, fmt.Errorf("bench: relation sizes: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("bench: relation sizes: %w", err)
	}
	return out, nil
}

// printRelations writes the relations of at least 1 MB on one line.
func printRelations(w io.Writer, rels []RelationSize) {
	if len(rels) == 0 {
		return
	}
	var b strings.Builder
	for _, r := range rels {
		if r.Bytes < 1<<20 {
			continue
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		name := r.Name
		if r.Kind == "toast" {
			name += " (toast)"
		}
		fmt.Fprintf(&b, "%s %.1f", name, float64(r.Bytes)/1e6)
		if r.DeadRows > 0 {
			fmt.Fprintf(&b, " (%d dead)", r.DeadRows)
		}
	}
	fmt.Fprintf(w, "  relations MB     %s\n", b.String())
}
