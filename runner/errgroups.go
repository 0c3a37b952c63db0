package runner

import (
	"fmt"
	"strings"
	"text/tabwriter"
)

// writeErrorGroups writes the run's failures grouped by cause, the one
// table an operator reads to decide what to fix before a redrive.
func (s *Summary) writeErrorGroups(b *strings.Builder) {
	if len(s.ErrorGroups) == 0 {
		return
	}
	b.WriteString("errors by cause (dead items first):\n")
	tw := tabwriter.NewWriter(b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  DEAD\tFAILURES\tSTAGE\tCLASS\tCAUSE")
	for _, g := range s.ErrorGroups {
		cause := g.Fingerprint
		if g.Messages == 1 && len(g.Examples) == 1 {
			cause = g.Examples[0] // one message: show it as it was
		}
		cause = strings.ReplaceAll(cause, "\n", " ")
		if len(cause) > 100 {
			cause = cause[:100] + "…"
		}
		fmt.Fprintf(tw, "  %d\t%d\t%s\t%s\t%s\n", g.Dead, g.Failures, g.Stage, g.Class, cause)
	}
	tw.Flush()
}
