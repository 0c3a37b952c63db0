package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// Output helpers shared by the read commands: human-readable tables by
// default, JSON with --json.

// addJSONFlag adds --json to a read command and returns where its value
// lands.
func addJSONFlag(cmd *cobra.Command) *bool {
	var v bool
	cmd.Flags().BoolVar(&v, "json", false, "print JSON instead of a table (for scripts)")
	return &v
}

// writeJSON writes v as indented JSON followed by a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write json: %w", err)
	}
	return nil
}

// table writes aligned columns. Rows are added with row; flush writes them.
type table struct {
	tw *tabwriter.Writer
}

// newTable starts a table on w with the given column headers.
func newTable(w io.Writer, headers ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	if len(headers) > 0 {
		t.row(anySlice(headers)...)
	}
	return t
}

func anySlice(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// row adds one row; each cell is formatted with fmt's %v after cleaning tabs
// and newlines out of strings.
func (t *table) row(cells ...any) {
	parts := make([]string, len(cells))
	for i, c := range cells {
		parts[i] = cell(fmt.Sprint(c))
	}
	fmt.Fprintln(t.tw, strings.Join(parts, "\t"))
}

// flush writes the table.
func (t *table) flush() error {
	if err := t.tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

// cell makes s safe for one table cell: no tabs or line breaks.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return strings.Map(func(r rune) rune {
		switch r {
		case '\t', '\n', '\r':
			return ' '
		}
		return r
	}, s)
}

// truncate shortens s to at most n runes, marking the cut with "...".
func truncate(s string, n int) string {
	s = cell(s)
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	if n <= 3 {
		return string(r[:n])
	}
	return string(r[:n-3]) + "..."
}

// fmtTime formats t for tables: RFC 3339 in UTC to the second, or "-".
func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// fmtDur formats d rounded to a readable precision, or "-" for zero.
func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d < time.Millisecond:
		return d.String()
	case d < time.Second:
		return d.Round(100 * time.Microsecond).String()
	case d < time.Minute:
		return d.Round(10 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

// fmtPct formats a ratio as a percentage with one decimal.
func fmtPct(r float64) string {
	return strconv.FormatFloat(r*100, 'f', 1, 64) + "%"
}

// kv prints aligned "key: value" lines.
func kv(w io.Writer, pairs ...any) error {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	for i := 0; i+1 < len(pairs); i += 2 {
		fmt.Fprintf(tw, "%v:\t%v\n", pairs[i], pairs[i+1])
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return nil
}

// nItems says "1 item" or "n items".
func nItems(n int) string {
	if n == 1 {
		return "1 item"
	}
	return strconv.Itoa(n) + " items"
}
