package runner

import (
	"strings"
	"testing"

	"github.com/redrive/redrive"
)

// TestSummaryErrorGroups: the summary shows one row per cause, with the
// message itself when the cause had only one.
func TestSummaryErrorGroups(t *testing.T) {
	s := &Summary{ErrorGroups: redrive.GroupErrors([]redrive.ErrorCount{
		{Pipeline: "p", Stage: "llm", Class: "final", Error: "item 1: malformed model output", Count: 20},
		{Pipeline: "p", Stage: "llm", Class: "final", Error: "item 2: malformed model output", Count: 14},
		{Pipeline: "p", Stage: "fetch", Class: "final", Error: "HTTP 404 for 'x.pdf'", Count: 2},
	}, nil)}
	var b strings.Builder
	s.writeErrorGroups(&b)
	out := b.String()
	for _, sub := range []string{"errors by cause", "34    0         llm    final  item <n>: malformed model output", "HTTP 404 for 'x.pdf'"} {
		if !strings.Contains(out, sub) {
			t.Errorf("summary lacks %q:\n%s", sub, out)
		}
	}
}
