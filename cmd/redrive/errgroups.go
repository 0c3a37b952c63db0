package main

import (
	"fmt"
	"io"

	"github.com/redrive/redrive"
)

// writeErrorGroups prints failures grouped by cause, at most max groups,
// with the most frequent message of each as its example.
func writeErrorGroups(w io.Writer, groups []redrive.ErrorGroup, max int) error {
	fmt.Fprintln(w, "\nErrors by cause (dead items, then failed attempts):")
	if len(groups) == 0 {
		fmt.Fprintln(w, "(no failures)")
		return nil
	}
	t := newTable(w, "PIPELINE", "STAGE", "CLASS", "DEAD", "FAILURES", "MESSAGES", "CAUSE", "EXAMPLE")
	for i, g := range groups {
		if i == max {
			break
		}
		example := ""
		if len(g.Examples) > 0 {
			example = g.Examples[0]
		}
		t.row(g.Pipeline, g.Stage, g.Class, g.Dead, g.Failures, g.Messages, truncate(g.Fingerprint, 80), truncate(example, 80))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if len(groups) > max {
		fmt.Fprintf(w, "(%d more causes; --top shows more)\n", len(groups)-max)
	}
	return nil
}
