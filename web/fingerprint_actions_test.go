package web_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/web"
)

// TestActionsByFingerprint: the export, redrive and purge of the
// dead-letter queue select one error group by its fingerprint, as the
// console links a group; the audit log records the fingerprint.
func TestActionsByFingerprint(t *testing.T) {
	f := newFixture(t, web.Options{Token: token})
	fp := "timeout talking to api"
	var res struct{ Count int }
	f.post(t, "/api/v1/dlq/redrive", `{"fingerprint":"`+fp+`","dry_run":true}`).json(t, &res)
	if res.Count != 30 {
		t.Errorf("redrive dry run by fingerprint: %d items, want the group's 30", res.Count)
	}
	res.Count = 0
	f.post(t, "/api/v1/dlq/purge", `{"fingerprint":"no such cause","dry_run":true}`).json(t, &res)
	if res.Count != 0 {
		t.Errorf("purge dry run of an unknown fingerprint: %d items, want 0", res.Count)
	}
	r := f.get(t, "/api/v1/dlq/export?fingerprint="+url.QueryEscape(fp))
	if r.code != http.StatusOK {
		t.Fatalf("export: %d %s", r.code, r.body)
	}
	if n := strings.Count(strings.TrimSpace(string(r.body)), "\n") + 1; n != 30 {
		t.Errorf("export by fingerprint: %d lines, want 30", n)
	}
	f.post(t, "/api/v1/dlq/redrive", `{"fingerprint":"`+fp+`"}`).json(t, &res)
	if res.Count != 30 {
		t.Fatalf("redrive by fingerprint: %d items, want 30", res.Count)
	}
	var groups struct{ Data []redrive.ErrorGroup }
	f.get(t, "/api/v1/errors").json(t, &groups)
	for _, g := range groups.Data {
		if g.Fingerprint == fp && g.Dead != 0 {
			t.Errorf("after the redrive, group %q counts %d dead", fp, g.Dead)
		}
	}
	var page struct{ Data []redrive.AuditAction }
	f.get(t, "/api/v1/audit?limit=1").json(t, &page)
	if len(page.Data) != 1 || page.Data[0].Filter != "fingerprint="+url.QueryEscape(fp) || page.Data[0].Count != 30 {
		t.Errorf("audit entry = %+v", page.Data)
	}
}
