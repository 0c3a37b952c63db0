package deploy_test

import (
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/redrive/redrive/deploy"
	"github.com/redrive/redrive/metrics"
)

// TestPromtool runs `promtool check rules` and `promtool test rules`. In
// CI (CI=true) a missing promtool fails the test; elsewhere it skips.
func TestPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool is not on PATH: install the prometheus package (apt-get install -y prometheus), which provides /usr/bin/promtool")
		}
		t.Skip("promtool is not on PATH; install the prometheus package (apt-get install -y prometheus) to check the alert rules")
	}
	for _, args := range [][]string{
		{"check", "rules", "alerts.yml"},
		{"test", "rules", "alerts_test.yml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "prometheus"
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// metricRef matches a metric name in a PromQL expression.
var metricRef = regexp.MustCompile(`\bredrive_[a-z0-9_]+\b`)

// exported reports whether name is a series of an exported metric: the
// name itself, or a histogram's _bucket, _sum or _count.
func exported(name string) bool {
	names := metrics.Names()
	if slices.Contains(names, name) {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && slices.Contains(names, base) &&
			(strings.HasSuffix(base, "_seconds")) {
			return true
		}
	}
	return false
}

// checkExpr reports an expression that references no redrive metric or
// one that package metrics does not export.
func checkExpr(t *testing.T, where, expr string) {
	t.Helper()
	refs := metricRef.FindAllString(expr, -1)
	if len(refs) == 0 {
		t.Errorf("%s: query %q references no redrive_ metric", where, expr)
	}
	for _, r := range refs {
		if !exported(r) {
			t.Errorf("%s: query references %s, which package metrics does not export (metrics.Names: %v)", where, r, metrics.Names())
		}
	}
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

type ruleTests struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		AlertRuleTest []struct {
			Alertname string           `yaml:"alertname"`
			ExpAlerts []map[string]any `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// readYAML decodes an embedded YAML file; strict refuses unknown fields.
func readYAML(t *testing.T, path string, v any, strict bool) {
	t.Helper()
	b, err := fs.ReadFile(deploy.Files, path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(strict)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestAlertRules checks the rules without promtool: every alert has a
// severity, a summary, a description and a runbook hint, queries exported
// metrics only, and has unit tests that both fire it and keep it quiet.
func TestAlertRules(t *testing.T) {
	var rules ruleFile
	readYAML(t, "prometheus/alerts.yml", &rules, true)
	var tests ruleTests
	readYAML(t, "prometheus/alerts_test.yml", &tests, false)
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	var alerts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts = append(alerts, r.Alert)
			checkExpr(t, "alert "+r.Alert, r.Expr)
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("alert %s: severity %q, want warning or critical", r.Alert, s)
			}
			for _, a := range []string{"summary", "description", "runbook"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("alert %s: no %s annotation", r.Alert, a)
				}
			}
			if !strings.Contains(r.Annotations["runbook"], "redrive ") {
				t.Errorf("alert %s: the runbook hint names no redrive command", r.Alert)
			}
			if !fires[r.Alert] || !quiet[r.Alert] {
				t.Errorf("alert %s: alerts_test.yml must test it firing (%v) and not firing (%v)", r.Alert, fires[r.Alert], quiet[r.Alert])
			}
		}
	}
	for _, want := range []string{"RedriveItemsStuck", "RedriveDeadLettersGrowing", "RedriveRunAborted", "RedriveBreakerOpen", "RedriveOldestDueItemTooOld"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("alerts.yml has no %s alert", want)
		}
	}
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

// TestDashboard checks that the dashboard is valid JSON with a data source
// variable, and that every panel queries metrics that package metrics
// exports, so that the dashboard cannot drift from the code.
func TestDashboard(t *testing.T) {
	b, err := fs.ReadFile(deploy.Files, "grafana/dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title      string  `json:"title"`
		UID        string  `json:"uid"`
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	if d.Title == "" || d.UID == "" {
		t.Error("dashboard has no title or uid")
	}
	hasDS := false
	for _, v := range d.Templating.List {
		if v.Type == "datasource" && v.Name == "datasource" && v.Query == "prometheus" {
			hasDS = true
		}
	}
	if !hasDS {
		t.Error(`dashboard has no "datasource" variable of type datasource for prometheus`)
	}
	ids := map[int]bool{}
	queried := map[string]bool{}
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel id %d used twice", p.ID)
			}
			ids[p.ID] = true
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q does not use the ${datasource} variable", p.Title)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				checkExpr(t, "panel "+p.Title, tg.Expr)
				for _, r := range metricRef.FindAllString(tg.Expr, -1) {
					queried[r] = true
				}
			}
		}
	}
	walk(d.Panels)
	for _, want := range []string{"redrive_items", "redrive_attempts_total", "redrive_dead_lettered_total",
		"redrive_retry_delay_seconds_bucket", "redrive_stage_duration_seconds_bucket", "redrive_breaker_state",
		"redrive_item_time_to_success_seconds_bucket"} {
		if !queried[want] {
			t.Errorf("no dashboard panel queries %s", want)
		}
	}
}

// TestOperationsDoc checks that docs/operations.md documents every metric
// and every alert.
func TestOperationsDoc(t *testing.T) {
	b, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, n := range metrics.Names() {
		if !strings.Contains(doc, "`"+n+"`") {
			t.Errorf("docs/operations.md does not document `%s`", n)
		}
	}
	var rules ruleFile
	readYAML(t, "prometheus/alerts.yml", &rules, true)
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if !strings.Contains(doc, r.Alert) {
				t.Errorf("docs/operations.md does not describe alert %s", r.Alert)
			}
		}
	}
}
