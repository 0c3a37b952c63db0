package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/redrive/redrive"
)

// PipelineExists answers from the runs alone, and a filter by pipeline is
// checked with it.
func TestPipelineExists(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, filepath.Join(t.TempDir(), "redrive.db"))
	if _, _, err := s.CreateRun(ctx, "p", redrive.RunOptions{}, time.Now()); err != nil {
		t.Fatal(err)
	}
	for pipeline, want := range map[string]bool{"p": true, "q": false, "": false} {
		if got, err := s.PipelineExists(ctx, pipeline); err != nil || got != want {
			t.Errorf("PipelineExists(%q) = %v, %v; want %v", pipeline, got, err, want)
		}
	}
	if err := redrive.CheckFilter(ctx, s, redrive.ItemFilter{Pipeline: "p"}); err != nil {
		t.Errorf("CheckFilter(pipeline p): %v", err)
	}
	if err := redrive.CheckFilter(ctx, s, redrive.ItemFilter{Pipeline: "q"}); err == nil {
		t.Error("CheckFilter(pipeline q) accepted a pipeline without runs")
	}
}
