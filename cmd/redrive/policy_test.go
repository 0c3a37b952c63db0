package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redrive/redrive/retry"
)

type seedRow struct{ nominal, lo, hi float64 } // seconds

// seedSchedules are the schedules of the design records in /work/shared/seeds, with the
// flags that describe them.
var seedSchedules = []struct {
	name string
	args []string
	want []seedRow
}{
	{"ADR-0010", []string{"--max-attempts", "4", "--backoff", "exponential", "--base", "30s", "--multiplier", "4", "--jitter", "0.2"},
		[]seedRow{{30, 24, 36}, {120, 96, 144}, {480, 384, 576}}},
	{"ADR-003", []string{"--max-attempts", "3", "--base", "1s", "--multiplier", "2", "--jitter", "0.25", "--max-delay", "30s"},
		[]seedRow{{1, 0.75, 1.25}, {2, 1.5, 2.5}}},
	{"Rust plan", []string{"--max-attempts", "8", "--base", "60s", "--multiplier", "2", "--max-delay", "3600s", "--jitter-mode", "none"},
		[]seedRow{{60, 60, 60}, {120, 120, 120}, {240, 240, 240}, {480, 480, 480}, {960, 960, 960}, {1920, 1920, 1920}, {3600, 3600, 3600}}},
	{"document policy", []string{"--max-attempts", "5", "--base", "10m", "--max-delay", "1h", "--jitter-mode", "none"},
		[]seedRow{{600, 600, 600}, {1200, 1200, 1200}, {2400, 2400, 2400}, {3600, 3600, 3600}}},
}

func checkRows(t *testing.T, got []jsonPreviewRow, want []seedRow) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d: %+v", len(got), len(want), got)
	}
	var cn, cl, ch float64
	for i, w := range want {
		g := got[i]
		cn, cl, ch = cn+w.nominal, cl+w.lo, ch+w.hi
		if g.Attempt != i+2 || g.NominalSeconds != w.nominal || g.LowSeconds != w.lo || g.HighSeconds != w.hi ||
			g.CumulativeSeconds != cn || g.CumLowSeconds != cl || g.CumHighSeconds != ch {
			t.Errorf("row %d = %+v, want attempt %d %v cumulative %v [%v, %v]", i, g, i+2, w, cn, cl, ch)
		}
	}
}

func runPreview(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newPolicyCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(append([]string{"preview"}, args...))
	err := cmd.Execute()
	return out.String(), err
}

func TestPolicyPreviewSeeds(t *testing.T) {
	for _, s := range seedSchedules {
		t.Run(s.name, func(t *testing.T) {
			out, err := runPreview(t, append(s.args, "--json")...)
			if err != nil {
				t.Fatal(err, out)
			}
			var rows []jsonPreviewRow
			if err := json.Unmarshal([]byte(out), &rows); err != nil {
				t.Fatal(err, out)
			}
			checkRows(t, rows, s.want)
		})
	}
}

func TestPolicyPreviewTable(t *testing.T) {
	out, err := runPreview(t, seedSchedules[0].args...)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"4 attempts, exponential backoff from 30s ×4, no max delay, jitter proportional ±20%",
		"ATTEMPT", "2        30s    24s    36s",
		"4        8m     6m24s  9m36s  10m30s      8m24s    12m36s",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestPreviewRowsFunction(t *testing.T) {
	p := retry.Policy{MaxAttempts: 3, BaseDelay: time.Second, Multiplier: 2, Jitter: 0.25, MaxDelay: 30 * time.Second}
	rows := previewRows(p)
	want := []previewRow{
		{Attempt: 2, Nominal: time.Second, Low: 750 * time.Millisecond, High: 1250 * time.Millisecond,
			CumNominal: time.Second, CumLow: 750 * time.Millisecond, CumHigh: 1250 * time.Millisecond},
		{Attempt: 3, Nominal: 2 * time.Second, Low: 1500 * time.Millisecond, High: 2500 * time.Millisecond,
			CumNominal: 3 * time.Second, CumLow: 2250 * time.Millisecond, CumHigh: 3750 * time.Millisecond},
	}
	if len(rows) != len(want) {
		t.Fatalf("rows %+v", rows)
	}
	for i := range want {
		if rows[i] != want[i] {
			t.Errorf("row %d = %+v, want %+v", i, rows[i], want[i])
		}
	}
	if n := len(previewRows(retry.Policy{MaxAttempts: 1})); n != 0 {
		t.Errorf("one attempt: %d rows", n)
	}
	if n := len(previewRows(retry.Policy{MaxAttempts: 1 << 30, MaxDelay: retry.NoMaxDelay})); n != maxPreviewRows {
		t.Errorf("huge: %d rows", n)
	}
	var buf bytes.Buffer
	if err := printPreview(&buf, previewRows(retry.Policy{MaxAttempts: 200, MaxDelay: retry.NoMaxDelay}), false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "unbounded") {
		t.Error("saturated cumulative should print as unbounded")
	}
}

func TestPolicyPreviewErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--backoff", "quadratic"},
		{"--jitter-mode", "some"},
		{"--jitter", "1.5"},
		{"--multiplier", "0.5"},
		{"--base", "2m", "--max-delay", "1m"},
		{"--base", "soon"},
		{"--max-attempts", "-1"},
		{"extra"},
	} {
		if out, err := runPreview(t, args...); err == nil {
			t.Errorf("%v: no error:\n%s", args, out)
		} else if _, ok := err.(*exitError); !ok && !strings.Contains(err.Error(), "invalid argument") {
			t.Errorf("%v: %v is not a usage error", args, err)
		}
	}
}

// TestPolicyPreviewBinary builds the redrive command and runs `policy preview` for the seeds.
func TestPolicyPreviewBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "redrive")
	if runtime.GOOS == "windows" {
		bin += ".exe"
	}
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, s := range seedSchedules {
		t.Run(s.name, func(t *testing.T) {
			cmd := exec.Command(bin, append([]string{"policy", "preview", "--json"}, s.args...)...)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			var rows []jsonPreviewRow
			if err := json.Unmarshal(out, &rows); err != nil {
				t.Fatal(err, string(out))
			}
			checkRows(t, rows, s.want)
		})
	}
	out, err := exec.Command(bin, "policy", "preview", "--max-attempts", "3", "--base", "1s", "--jitter", "0.25", "--max-delay", "30s").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "3        2s     1.5s   2.5s   3s          2.25s    3.75s") {
		t.Errorf("table: %v\n%s", err, out)
	}
	err = exec.Command(bin, "policy", "preview", "--backoff", "nope").Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Errorf("bad flag: %v, want exit status 2", err)
	}
}
