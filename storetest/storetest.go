// Package storetest is the conformance suite every redrive.Store passes.
//
// A store package wires it into its tests:
//
//	func TestStore(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) redrive.Store {
//			s := openFreshStore(t)
//			t.Cleanup(func() { s.Close() })
//			return s
//		})
//	}
//
// Every subtest opens its own store. Times are passed explicitly from a fixed
// base time; stores must round-trip times to at least microsecond precision
// and return them in UTC.
//
// Beyond the doc comments of redrive.Store, the suite pins down:
//
//   - ItemFilter.Since is inclusive and Until exclusive; both compare the
//     reason's time of dead and canceled items and UpdatedAt of the others.
//   - A running item's UpdatedAt is when its lease began: the claim's or
//     the take-over's Now, not moved by heartbeats or start marks.
//   - ItemFilter.Limit caps every operation that takes a filter (ListItems,
//     Count, CancelPending, Redrive, Purge), in ID order.
//   - ErrorContains matches literally ('%' and '_' are not wildcards).
//   - ClaimRequest.Pipelines empty claims nothing, for ClaimExpired too.
//   - CancelPending with an empty Reason.Stage records each item's stage.
//   - Redrive and Purge refuse states other than dead and canceled.
//   - A completion whose item appears twice in one Complete call is applied
//     as if the calls were sequential: the second is fenced off.
//   - RetryHistogram counts an item's retries as its attempts that were not
//     rate-limited, minus the number of distinct stages they were made at,
//     floored at 0.
//   - TopErrors is ordered by pipeline, stage (in pipeline order), count
//     descending, then class and error.
//   - Item IDs increase in enqueue order; attempts are listed in the order
//     they were recorded.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redrive/redrive"
)

// Base is the fixed time the suite's clock starts at.
var Base = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// Run runs the conformance suite. open must return a fresh, empty store on
// every call; the suite does not close it (register a t.Cleanup in open).
func Run(t *testing.T, open func(t *testing.T) redrive.Store) {
	tests := []struct {
		name string
		fn   func(h *h)
	}{
		{"CreateRun", testCreateRun},
		{"NotFound", testNotFound},
		{"Enqueue", testEnqueue},
		{"EnqueueKeys", testEnqueueKeys},
		{"EnqueueInvalid", testEnqueueInvalid},
		{"ClaimOrder", testClaimOrder},
		{"ClaimFilters", testClaimFilters},
		{"ClaimConcurrent", testClaimConcurrent},
		{"Fencing", testFencing},
		{"LeaseUpdatedAt", testLeaseUpdatedAt},
		{"Heartbeat", testHeartbeat},
		{"Release", testRelease},
		{"StartMarks", testStartMarks},
		{"PaceWaits", testPaceWaits},
		{"ClaimStarted", testClaimStarted},
		{"ClaimedItemAsStored", testClaimedItemAsStored},
		{"CompleteStates", testCompleteStates},
		{"CompleteBatch", testCompleteBatch},
		{"CompleteSuccesses", testCompleteSuccesses},
		{"CountsAddUp", testCountsAddUp},
		{"SetRunStatus", testSetRunStatus},
		{"FinishRun", testFinishRun},
		{"ListRuns", testListRuns},
		{"CancelPending", testCancelPending},
		{"ListItemsFilters", testListItemsFilters},
		{"ListItemsPaging", testListItemsPaging},
		{"ListItemsRunPaging", testListItemsRunPaging},
		{"Attempts", testAttempts},
		{"StateCounts", testStateCounts},
		{"RetryHistogram", testRetryHistogram},
		{"TopErrors", testTopErrors},
		{"OldestDue", testOldestDue},
		{"OldestDueReady", testOldestDueReady},
		{"Redrive", testRedrive},
		{"RedriveFilters", testRedriveFilters},
		{"Purge", testPurge},
		{"DeleteSucceeded", testDeleteSucceeded},
		{"FilterValidate", testFilterValidate},
		{"TimeRoundTrip", testTimeRoundTrip},
		{"PurgeKeepsCounts", testPurgeKeepsCounts}, {"ErrorContainsIgnoresCase", testErrorContainsIgnoresCase}, {"RunSource", testRunSource}, {"Workers", testWorkers}, {"RedriveFromStage", testRedriveFromStage},
		{"Seeds", testSeeds},
		{"FilterIDs", testFilterIDs},
		{"OrderAt", testOrderAt}, {"ClaimWaitingBacklog", testClaimWaitingBacklog}, {"DeleteFinishedRuns", testDeleteFinishedRuns}, {"LargeEnqueue", testLargeEnqueue},
		{"SharedLimits", testSharedLimits},
		{"RateLimitedWaits", testRateLimitedWaits},
		{"ErrorGroups", testErrorGroups}, {"StoredFingerprints", testStoredFingerprints}, {"FailureCounts", testFailureCounts},
		{"AuditLog", testAuditLog},
		{"RetryNow", testRetryNow}, {"RetryNowIsReady", testRetryNowIsReady}, {"FilterKey", testFilterKey}, {"ActionMarks", testActionMarks}, {"FilterAction", testFilterAction},
		{"PauseStages", testPauseStages},
		{"Timeline", testTimeline}, {"LeaseLoads", testLeaseLoads}, {"PauseReason", testPauseReason},
		{"OutboxWrites", testOutboxWrites}, {"OutboxDelivery", testOutboxDelivery}, {"OutboxCallbacks", testOutboxCallbacks},
		{"OutboxOutput", testOutboxOutput},
		{"RequestKeys", testRequestKeys},
		{"TraceContext", testTraceContext},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(&h{T: t, s: open(t), ctx: context.Background()})
		})
	}
}

// h bundles a subtest's store with helpers that fail the test on error.
type h struct {
	*testing.T
	s   redrive.Store
	ctx context.Context
}

func at(d time.Duration) time.Time { return Base.Add(d) }

func (h *h) run(p, name string) redrive.Run {
	h.Helper()
	r, _, err := h.s.CreateRun(h.ctx, p, redrive.RunOptions{Name: name}, Base)
	if err != nil {
		h.Fatalf("CreateRun: %v", err)
	}
	return r
}

func (h *h) enqueue(run redrive.Run, stage string, now time.Time, items ...redrive.NewItem) []int64 {
	h.Helper()
	res, err := h.s.Enqueue(h.ctx, redrive.EnqueueRequest{RunID: run.ID, Pipeline: run.Pipeline, Stage: stage, Items: items, Now: now})
	if err != nil {
		h.Fatalf("Enqueue: %v", err)
	}
	if len(res) != len(items) {
		h.Fatalf("Enqueue returned %d results for %d items", len(res), len(items))
	}
	ids := make([]int64, len(res))
	for i, r := range res {
		ids[i] = r.ID
	}
	return ids
}

// enqueueN enqueues n plain items.
func (h *h) enqueueN(run redrive.Run, stage string, now time.Time, n int) []int64 {
	h.Helper()
	items := make([]redrive.NewItem, n)
	for i := range items {
		items[i].Payload = fmt.Appendf(nil, "item-%d", i)
	}
	return h.enqueue(run, stage, now, items...)
}

func (h *h) claim(req redrive.ClaimRequest) []redrive.Lease {
	h.Helper()
	if req.Owner == "" {
		req.Owner = "worker-1"
	}
	if req.LeaseUntil.IsZero() {
		req.LeaseUntil = req.Now.Add(time.Minute)
	}
	ls, err := h.s.Claim(h.ctx, req)
	if err != nil {
		h.Fatalf("Claim: %v", err)
	}
	return ls
}

// claimAll claims every item of pipeline p due at now.
func (h *h) claimAll(p string, now time.Time) []redrive.Lease {
	h.Helper()
	return h.claim(redrive.ClaimRequest{Pipelines: []string{p}, Limit: 100000, Now: now})
}

func (h *h) complete(cs ...redrive.Completion) []bool {
	h.Helper()
	ap, err := h.s.Complete(h.ctx, cs)
	if err != nil {
		h.Fatalf("Complete: %v", err)
	}
	if len(ap) != len(cs) {
		h.Fatalf("Complete returned %d results for %d completions", len(ap), len(cs))
	}
	return ap
}

func (h *h) item(id int64) redrive.Item {
	h.Helper()
	it, err := h.s.GetItem(h.ctx, id)
	if err != nil {
		h.Fatalf("GetItem(%d): %v", id, err)
	}
	return it
}

func (h *h) attempts(id int64) []redrive.Attempt {
	h.Helper()
	as, err := h.s.Attempts(h.ctx, id)
	if err != nil {
		h.Fatalf("Attempts(%d): %v", id, err)
	}
	return as
}

func (h *h) getRun(id int64) redrive.Run {
	h.Helper()
	r, err := h.s.GetRun(h.ctx, id)
	if err != nil {
		h.Fatalf("GetRun(%d): %v", id, err)
	}
	return r
}

func (h *h) list(f redrive.ItemFilter) []redrive.Item {
	h.Helper()
	items, err := h.s.ListItems(h.ctx, f)
	if err != nil {
		h.Fatalf("ListItems(%+v): %v", f, err)
	}
	return items
}

func (h *h) count(f redrive.ItemFilter) int {
	h.Helper()
	n, err := h.s.Count(h.ctx, f)
	if err != nil {
		h.Fatalf("Count(%+v): %v", f, err)
	}
	return n
}

// succeed completes a lease as succeeded at its stage.
func succeed(l redrive.Lease, now time.Time) redrive.Completion {
	return redrive.Completion{ItemID: l.Item.ID, Token: l.Token, State: redrive.StateSucceeded,
		Stage: l.Item.Stage, StageIndex: l.Item.StageIndex, Attempt: l.Item.Attempt + 1, Now: now,
		Record: redrive.Attempt{Stage: l.Item.Stage, StageIndex: l.Item.StageIndex, Number: l.Item.Attempt + 1,
			Outcome: redrive.OutcomeSucceeded, StartedAt: now, FinishedAt: now}}
}

// retry completes a lease as a failed attempt retried at next.
func retry(l redrive.Lease, now, next time.Time, msg string) redrive.Completion {
	return redrive.Completion{ItemID: l.Item.ID, Token: l.Token, State: redrive.StatePending,
		Stage: l.Item.Stage, StageIndex: l.Item.StageIndex, Attempt: l.Item.Attempt + 1, NextAt: next, Now: now,
		Record: redrive.Attempt{Stage: l.Item.Stage, StageIndex: l.Item.StageIndex, Number: l.Item.Attempt + 1,
			Outcome: redrive.OutcomeRetry, Class: "retryable", Error: msg, StartedAt: now, FinishedAt: now,
			Delay: next.Sub(now)}}
}

// kill completes a lease as dead with class and msg.
func kill(l redrive.Lease, now time.Time, class, msg string) redrive.Completion {
	n := l.Item.Attempt + 1
	return redrive.Completion{ItemID: l.Item.ID, Token: l.Token, State: redrive.StateDead,
		Stage: l.Item.Stage, StageIndex: l.Item.StageIndex, Attempt: n, Now: now,
		Reason: &redrive.Reason{Stage: l.Item.Stage, Class: class, Error: msg, Attempts: n, At: now},
		Record: redrive.Attempt{Stage: l.Item.Stage, StageIndex: l.Item.StageIndex, Number: n,
			Outcome: redrive.OutcomeDead, Class: class, Error: msg, StartedAt: now, FinishedAt: now}}
}

// advance completes a lease by moving the item to the next stage.
func advance(l redrive.Lease, now time.Time, stage string, payload []byte) redrive.Completion {
	return redrive.Completion{ItemID: l.Item.ID, Token: l.Token, State: redrive.StatePending,
		Stage: stage, StageIndex: l.Item.StageIndex + 1, Attempt: 0, NextAt: now, Payload: payload, Now: now,
		Record: redrive.Attempt{Stage: l.Item.Stage, StageIndex: l.Item.StageIndex, Number: l.Item.Attempt + 1,
			Outcome: redrive.OutcomeSucceeded, StartedAt: now, FinishedAt: now}}
}

func ids(ls []redrive.Lease) []int64 {
	out := make([]int64, len(ls))
	for i, l := range ls {
		out[i] = l.Item.ID
	}
	return out
}

func itemIDs(items []redrive.Item) []int64 {
	out := make([]int64, len(items))
	for i, it := range items {
		out[i] = it.ID
	}
	return out
}

func sorted(xs []int64) []int64 {
	xs = slices.Clone(xs)
	slices.Sort(xs)
	return xs
}

func (h *h) equalIDs(what string, got, want []int64) {
	h.Helper()
	if !slices.Equal(got, want) {
		h.Errorf("%s: got IDs %v, want %v", what, got, want)
	}
}

func (h *h) equalTime(what string, got, want time.Time) {
	h.Helper()
	if !got.Equal(want) {
		h.Errorf("%s: got %v, want %v", what, got, want)
	}
	if !got.IsZero() && got.Location() != time.UTC {
		h.Errorf("%s: location %v, want UTC", what, got.Location())
	}
}

func (h *h) isNotFound(what string, err error) {
	h.Helper()
	if !errors.Is(err, redrive.ErrNotFound) {
		h.Errorf("%s: err = %v, want one wrapping redrive.ErrNotFound", what, err)
	}
}

func testCreateRun(h *h) {
	opts := redrive.RunOptions{Name: "nightly", SuccessThreshold: 0.9, PartialThreshold: 0.4, FailureBudget: 0.2, MinItems: 10}
	r, created, err := h.s.CreateRun(h.ctx, "p", opts, Base)
	if err != nil || !created {
		h.Fatalf("CreateRun = %v, %v; want created", created, err)
	}
	if r.ID == 0 || r.Pipeline != "p" || r.Name != "nightly" || r.Status != redrive.RunRunning || r.Options != opts {
		h.Errorf("created run = %+v", r)
	}
	h.equalTime("CreatedAt", r.CreatedAt, Base)
	if !r.FinishedAt.IsZero() {
		h.Errorf("FinishedAt = %v, want zero", r.FinishedAt)
	}
	h.enqueueN(r, "a", Base, 3)

	// Resume by name.
	again, created, err := h.s.CreateRun(h.ctx, "p", redrive.RunOptions{Name: "nightly"}, at(time.Hour))
	if err != nil || created {
		h.Fatalf("CreateRun again = %v, %v; want existing", created, err)
	}
	if again.ID != r.ID || again.Options != opts {
		h.Errorf("resumed run = %+v, want ID %d with options %+v", again, r.ID, opts)
	}
	h.equalTime("resumed CreatedAt", again.CreatedAt, Base)
	if again.Counts.Total != 3 || again.Counts.Pending != 3 {
		h.Errorf("resumed run counts = %+v, want 3 pending", again.Counts)
	}

	// Names are per pipeline; unnamed runs are always new.
	other, created, err := h.s.CreateRun(h.ctx, "q", redrive.RunOptions{Name: "nightly"}, Base)
	if err != nil || !created || other.ID == r.ID {
		h.Errorf("CreateRun(q, nightly) = %+v, %v, %v; want a new run", other, created, err)
	}
	u1, c1, err1 := h.s.CreateRun(h.ctx, "p", redrive.RunOptions{}, Base)
	u2, c2, err2 := h.s.CreateRun(h.ctx, "p", redrive.RunOptions{}, Base)
	if err1 != nil || err2 != nil || !c1 || !c2 || u1.ID == u2.ID {
		h.Errorf("unnamed runs: %d %v %v, %d %v %v; want two new runs", u1.ID, c1, err1, u2.ID, c2, err2)
	}

	got := h.getRun(r.ID)
	if got.Name != "nightly" || got.Options != opts || got.Status != redrive.RunRunning {
		h.Errorf("GetRun = %+v", got)
	}
	h.equalTime("GetRun CreatedAt", got.CreatedAt, Base)
}

func testNotFound(h *h) {
	_, err := h.s.GetRun(h.ctx, 424242)
	h.isNotFound("GetRun", err)
	_, err = h.s.GetItem(h.ctx, 424242)
	h.isNotFound("GetItem", err)
	r := h.run("p", "")
	id := h.enqueueN(r, "a", Base, 1)[0]
	if _, err := h.s.GetItem(h.ctx, id+1000); !errors.Is(err, redrive.ErrNotFound) {
		h.Errorf("GetItem(missing) = %v", err)
	}
	as, err := h.s.Attempts(h.ctx, 424242)
	if err != nil || len(as) != 0 {
		h.Errorf("Attempts(missing) = %v, %v; want none", as, err)
	}
}

func testEnqueue(h *h) {
	r := h.run("p", "")
	now := at(time.Second)
	got := h.enqueue(r, "first", now,
		redrive.NewItem{Payload: []byte("one")},
		redrive.NewItem{Payload: []byte("two"), Priority: 7},
		redrive.NewItem{Key: "k3", Payload: []byte("three")})
	if len(got) != 3 || got[0] == got[1] || got[1] == got[2] || got[0] == got[2] {
		h.Fatalf("IDs %v are not distinct", got)
	}
	if !(got[0] < got[1] && got[1] < got[2]) {
		h.Errorf("IDs %v do not increase in enqueue order", got)
	}
	for i, want := range []string{"one", "two", "three"} {
		it := h.item(got[i])
		if it.RunID != r.ID || it.Pipeline != "p" || it.Stage != "first" || it.StageIndex != 0 ||
			it.State != redrive.StatePending || it.Attempt != 0 || it.RateLimitWaits != 0 || it.Reason != nil {
			h.Errorf("item %d = %+v", i, it)
		}
		if !bytes.Equal(it.Payload, []byte(want)) || !bytes.Equal(it.Input, []byte(want)) {
			h.Errorf("item %d payload %q input %q, want %q", i, it.Payload, it.Input, want)
		}
		h.equalTime("EnqueuedAt", it.EnqueuedAt, now)
		h.equalTime("NextAt", it.NextAt, now)
		if it.LeaseOwner != "" || !it.LeaseExpiresAt.IsZero() {
			h.Errorf("item %d has a lease: %q %v", i, it.LeaseOwner, it.LeaseExpiresAt)
		}
	}
	if it := h.item(got[1]); it.Priority != 7 {
		h.Errorf("priority = %d, want 7", it.Priority)
	}
	if it := h.item(got[2]); it.Key != "k3" {
		h.Errorf("key = %q, want k3", it.Key)
	}
	if it := h.item(got[0]); it.Key != "" {
		h.Errorf("key = %q, want none", it.Key)
	}
	if c := h.getRun(r.ID).Counts; c.Total != 3 || c.Pending != 3 {
		h.Errorf("counts = %+v", c)
	}
	res, err := h.s.Enqueue(h.ctx, redrive.EnqueueRequest{RunID: r.ID, Pipeline: "p", Stage: "first", Now: now})
	if err != nil || len(res) != 0 {
		h.Errorf("Enqueue(no items) = %v, %v", res, err)
	}
}

func testEnqueueKeys(h *h) {
	r := h.run("p", "")
	res, err := h.s.Enqueue(h.ctx, redrive.EnqueueRequest{RunID: r.ID, Pipeline: "p", Stage: "a", Now: Base,
		Items: []redrive.NewItem{{Key: "x", Payload: []byte("1")}, {Key: "y"}, {Key: "x", Payload: []byte("2")}, {}, {}}})
	if err != nil {
		h.Fatal(err)
	}
	if res[0].Existing || res[1].Existing || res[3].Existing || res[4].Existing {
		h.Errorf("new items marked existing: %+v", res)
	}
	if !res[2].Existing || res[2].ID != res[0].ID {
		h.Errorf("duplicate key in one request: %+v, want existing ID %d", res[2], res[0].ID)
	}
	if res[3].ID == res[4].ID {
		h.Errorf("items without keys share ID %d", res[3].ID)
	}
	if p := h.item(res[0].ID).Payload; string(p) != "1" {
		h.Errorf("payload of keyed item = %q, want the first one", p)
	}

	// A later request, even for another run of the pipeline (a resume).
	r2 := h.run("p", "")
	res2, err := h.s.Enqueue(h.ctx, redrive.EnqueueRequest{RunID: r2.ID, Pipeline: "p", Stage: "a", Now: at(time.Minute),
		Items: []redrive.NewItem{{Key: "y"}, {Key: "z"}}})
	if err != nil {
		h.Fatal(err)
	}
	if !res2[0].Existing || res2[0].ID != res[1].ID || res2[1].Existing {
		h.Errorf("second request = %+v, want y existing (%d), z new", res2, res[1].ID)
	}
	if it := h.item(res[1].ID); it.RunID != r.ID {
		h.Errorf("existing item moved to run %d", it.RunID)
	}

	// Keys are per pipeline.
	q := h.run("q", "")
	res3, err := h.s.Enqueue(h.ctx, redrive.EnqueueRequest{RunID: q.ID, Pipeline: "q", Stage: "a", Now: Base,
		Items: []redrive.NewItem{{Key: "x"}}})
	if err != nil {
		h.Fatal(err)
	}
	if res3[0].Existing || res3[0].ID == res[0].ID {
		h.Errorf("key x in pipeline q = %+v, want a new item", res3[0])
	}
	if n := h.count(redrive.ItemFilter{Pipeline: "p"}); n != 5 {
		h.Errorf("pipeline p has %d items, want 5", n)
	}
	if c := h.getRun(r.ID).Counts; c.Total != 4 {
		h.Errorf("run counts = %+v, want 4 items", c)
	}
}

func testEnqueueInvalid(h *h) {
	r := h.run("p", "")
	now := at(time.Second)
	got := h.enqueue(r, "parse", now, redrive.NewItem{Payload: []byte("ok")},
		redrive.NewItem{Key: "bad", Payload: []byte("{"), Invalid: "unexpected end of JSON"})
	it := h.item(got[1])
	if it.State != redrive.StateDead || it.Reason == nil {
		h.Fatalf("invalid item = %+v, want dead with a reason", it)
	}
	want := redrive.Reason{Stage: "parse", Class: redrive.ClassInvalidInput, Error: "unexpected end of JSON", Attempts: 0, At: now}
	if got := *it.Reason; got.Stage != want.Stage || got.Class != want.Class || got.Error != want.Error || got.Attempts != 0 {
		h.Errorf("reason = %+v, want %+v", got, want)
	}
	h.equalTime("reason At", it.Reason.At, now)
	if c := h.getRun(r.ID).Counts; c.Total != 2 || c.Dead != 1 || c.Pending != 1 {
		h.Errorf("counts = %+v", c)
	}
	ls := h.claimAll("p", at(time.Hour))
	h.equalIDs("claimable", ids(ls), got[:1])
	if n := h.count(redrive.ItemFilter{States: []redrive.State{redrive.StateDead}, Class: redrive.ClassInvalidInput}); n != 1 {
		h.Errorf("DLQ invalid_input count = %d", n)
	}
}

func testClaimOrder(h *h) {
	r := h.run("p", "")
	t0 := Base
	// Same priority and enqueue time: ID order.
	first := h.enqueue(r, "a", t0, redrive.NewItem{Key: "old"}, redrive.NewItem{Key: "future"})
	old, future := first[0], first[1]
	if ls := h.claim(redrive.ClaimRequest{Pipelines: []string{"p"}, Limit: 10, Now: t0.Add(-time.Second)}); len(ls) != 0 {
		h.Errorf("claimed %v before items were due", ids(ls))
	}
	ls := h.claim(redrive.ClaimRequest{Owner: "w", Pipelines: []string{"p"}, Limit: 10, Now: t0, LeaseUntil: t0.Add(time.Minute)})
	h.equalIDs("first claim", ids(ls), []int64{old, future})
	for _, l := range ls {
		if l.Item.State != redrive.StateRunning || l.Item.LeaseOwner != "w" || l.Token == 0 {
			h.Errorf("lease = %+v, token %d", l.Item, l.Token)
		}
		h.equalTime("LeaseExpiresAt", l.Item.LeaseExpiresAt, t0.Add(time.Minute))
	}
	// old is retried soon, future much later.
	h.complete(retry(ls[0], t0, t0.Add(10*time.Second), "boom"), retry(ls[1], t0, t0.Add(time.Hour), "boom"))

	// Newer items, one with a high priority.
	later := h.enqueue(r, "a", t0.Add(time.Second), redrive.NewItem{Key: "mid"})
	high := h.enqueue(r, "a", t0.Add(2*time.Second), redrive.NewItem{Key: "high", Priority: 5})
	newer := h.enqueue(r, "a", t0.Add(3*time.Second), redrive.NewItem{Key: "new"})

	// At t0+5s the retry of old is not due yet.
	ls = h.claim(redrive.ClaimRequest{Pipelines: []string{"p"}, Limit: 1, Now: t0.Add(5 * time.Second)})
	h.equalIDs("claim at +5s", ids(ls), high)
	h.complete(succeed(ls[0], t0.Add(5*time.Second)))

	// At t0+20s the due retry of old competes by enqueue time: it goes first.
	ls = h.claim(redrive.ClaimRequest{Pipelines: []string{"p"}, Limit: 10, Now: t0.Add(20 * time.Second)})
	h.equalIDs("claim at +20s", ids(ls), []int64{old, later[0], newer[0]})
	if len(ls) > 0 && ls[0].Item.Attempt != 1 {
		h.Errorf("retried item attempt = %d, want 1", ls[0].Item.Attempt)
	}
	if it := h.item(future); it.State != redrive.StatePending {
		h.Errorf("not-due item state = %s", it.State)
	}
	if ls := h.claim(redrive.ClaimRequest{Pipelines: []string{"p"}, Limit: 10, Now: t0.Add(30 * time.Minute)}); len(ls) != 0 {
		h.Errorf("claimed %v, want nothing due", ids(ls))
	}
	ls = h.claim(redrive.ClaimRequest{Pipelines: []string{"p"}, Limit: 10, Now: t0.Add(time.Hour)})
	h.equalIDs("claim at +1h", ids(ls), []int64{future})

	// Priority beats enqueue time.
	r2 := h.run("prio", "")
	lo := h.enqueue(r2, "a", t0, redrive.NewItem{Priority: -1})
	mid := h.enqueue(r2, "a", t0.Add(time.Second), redrive.NewItem{})
	hi := h.enqueue(r2, "a", t0.Add(2*time.Second), redrive.NewItem{Priority: 3})
	ls = h.claim(redrive.ClaimRequest{Pipelines: []string{"prio"}, Limit: 10, Now: t0.Add(time.Minute)})
	h.equalIDs("priority order", ids(ls), []int64{hi[0], mid[0], lo[0]})

	// Limit.
	r3 := h.run("lim", "")
	h.enqueueN(r3, "a", t0, 10)
	if ls := h.claim(redrive.ClaimRequest{Pipelines: []string{"lim"}, Limit: 4, Now: t0}); len(ls) != 4 {
		h.Errorf("Limit 4 claimed %d", len(ls))
	}
	if ls := h.claim(redrive.ClaimRequest{Pipelines: []string{"lim"}, Limit: 100, Now: t0}); len(ls) != 6 {
		h.Errorf("rest claimed %d, want 6", len(ls))
	}
}

func testClaimFilters(h *h) {
	p, q := h.run("p", ""), h.run("q", "")
	pa := h.enqueueN(p, "a", Base, 3)
	pb := h.enqueueN(p, "b", Base, 3)
	qa := h.enqueueN(q, "a", Base, 3)
	now := at(time.Second)
	release := func(ls []redrive.Lease) {
		h.Helper()
		refs := make([]redrive.LeaseRef, len(ls))
		for i, l := range ls {
			refs[i] = l.Ref()
		}
		if err := h.s.Release(h.ctx, refs, now); err != nil {
			h.Fatal(err)
		}
	}
	if ls := h.claim(redrive.ClaimRequest{Limit: 100, Now: now}); len(ls) != 0 {
		h.Errorf("no pipelines claimed %v, want none", ids(ls))
	}
	ls := h.claim(redrive.ClaimRequest{Pipelines: []string{"q"}, Limit: 100, Now: now})
	h.equalIDs("pipeline q", sorted(ids(ls)), qa)
	release(ls)
	ls = h.claim(redrive.ClaimRequest{Pipelines: []string{"p", "q"}, Limit: 100, Now: now})
	h.equalIDs("pipelines p, q", sorted(ids(ls)), sorted(slices.Concat(pa, pb, qa)))
	release(ls)
	ls = h.claim(redrive.ClaimRequest{Pipelines: []string{"p", "q"}, Only: []redrive.StageKey{{Pipeline: "p", Stage: "b"}}, Limit: 100, Now: now})
	h.equalIDs("only p/b", sorted(ids(ls)), pb)
	release(ls)
	ls = h.claim(redrive.ClaimRequest{Pipelines: []string{"p", "q"},
		Only: []redrive.StageKey{{Pipeline: "p", Stage: "b"}, {Pipeline: "q", Stage: "a"}}, Limit: 100, Now: now})
	h.equalIDs("only p/b, q/a", sorted(ids(ls)), sorted(slices.Concat(pb, qa)))
	release(ls)
	ls = h.claim(redrive.ClaimRequest{Pipelines: []string{"p", "q"}, Exclude: []redrive.StageKey{{Pipeline: "p", Stage: "a"}}, Limit: 100, Now: now})
	h.equalIDs("exclude p/a", sorted(ids(ls)), sorted(slices.Concat(pb, qa)))
	release(ls)
	ls = h.claim(redrive.ClaimRequest{Pipelines: []string{"p"}, Exclude: []redrive.StageKey{{Pipeline: "p", Stage: "a"}, {Pipeline: "p", Stage: "b"}}, Limit: 100, Now: now})
	h.equalIDs("exclude all of p", ids(ls), nil)
	ls = h.claim(redrive.ClaimRequest{Pipelines: []string{"p"}, Only: []redrive.StageKey{{Pipeline: "q", Stage: "a"}}, Limit: 100, Now: now})
	h.equalIDs("only a stage of another pipeline", ids(ls), nil)
	ls = h.claim(redrive.ClaimRequest{Pipelines: []string{"p"}, Limit: 2, Now: now})
	h.equalIDs("limit 2", ids(ls), pa[:2])
	if ls := h.claim(redrive.ClaimRequest{Pipelines: []string{"p"}, Limit: 0, Now: now}); len(ls) != 0 {
		h.Errorf("Limit 0 claimed %d", len(ls))
	}
}

func testClaimConcurrent(h *h) {
	const n, workers = 2000, 8
	r := h.run("p", "")
	all := h.enqueueN(r, "a", Base, n)
	var (
		mu     sync.Mutex
		seen   = map[int64]int{}
		tokens = map[int64]int64{}
		wg     sync.WaitGroup
		errs   = make(chan error, workers)
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				ls, err := h.s.Claim(h.ctx, redrive.ClaimRequest{Owner: fmt.Sprintf("w%d", w), Pipelines: []string{"p"},
					Limit: 37, Now: at(time.Second), LeaseUntil: at(time.Minute)})
				if err != nil {
					errs <- err
					return
				}
				if len(ls) == 0 {
					return
				}
				mu.Lock()
				for _, l := range ls {
					seen[l.Item.ID]++
					tokens[l.Item.ID] = l.Token
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		h.Fatalf("Claim: %v", err)
	}
	for id, c := range seen {
		if c != 1 {
			h.Errorf("item %d claimed %d times", id, c)
		}
	}
	if len(seen) != n {
		h.Errorf("claimed %d distinct items, want %d", len(seen), n)
	}
	for _, id := range all {
		if seen[id] == 0 {
			h.Errorf("item %d never claimed", id)
			break
		}
	}
	if c := h.getRun(r.ID).Counts; c.Running != n || c.Total != n {
		h.Errorf("counts = %+v, want %d running", c, n)
	}
}

func testFencing(h *h) {
	r := h.run("p", "")
	id := h.enqueue(r, "a", Base, redrive.NewItem{Payload: []byte("in")})[0]
	ls := h.claim(redrive.ClaimRequest{Owner: "stale", Pipelines: []string{"p"}, Limit: 1, Now: Base, LeaseUntil: at(30 * time.Second)})
	if len(ls) != 1 {
		h.Fatalf("claimed %d", len(ls))
	}
	old := ls[0]

	if ex, err := h.s.ClaimExpired(h.ctx, redrive.ClaimRequest{Owner: "rescuer", Pipelines: []string{"p"}, Limit: 10,
		Now: at(10 * time.Second), LeaseUntil: at(time.Minute)}); err != nil || len(ex) != 0 {
		h.Fatalf("ClaimExpired before expiry = %v, %v; want none", ids(ex), err)
	}
	if ex, err := h.s.ClaimExpired(h.ctx, redrive.ClaimRequest{Owner: "rescuer", Limit: 10,
		Now: at(time.Minute), LeaseUntil: at(2 * time.Minute)}); err != nil || len(ex) != 0 {
		h.Fatalf("ClaimExpired without pipelines = %v, %v; want none", ids(ex), err)
	}
	ex, err := h.s.ClaimExpired(h.ctx, redrive.ClaimRequest{Owner: "rescuer", Pipelines: []string{"p"}, Limit: 10,
		Now: at(time.Minute), LeaseUntil: at(2 * time.Minute)})
	if err != nil || len(ex) != 1 {
		h.Fatalf("ClaimExpired = %v, %v; want the item", ids(ex), err)
	}
	cur := ex[0]
	if cur.Item.ID != id || cur.Token == old.Token || cur.Item.LeaseOwner != "rescuer" || cur.Item.State != redrive.StateRunning {
		h.Errorf("taken-over lease = %+v token %d (old token %d)", cur.Item, cur.Token, old.Token)
	}
	h.equalTime("rescuer LeaseExpiresAt", cur.Item.LeaseExpiresAt, at(2*time.Minute))
	before := h.item(id)

	// The stale worker's completion and heartbeat change nothing.
	c := succeed(old, at(70*time.Second))
	c.Payload = []byte("stale output")
	if ap := h.complete(c); ap[0] {
		h.Errorf("stale Complete applied")
	}
	lost, err := h.s.Heartbeat(h.ctx, []redrive.LeaseRef{old.Ref()}, at(time.Hour))
	if err != nil || !slices.Equal(lost, []int64{id}) {
		h.Errorf("stale Heartbeat lost = %v, %v; want [%d]", lost, err, id)
	}
	if err := h.s.Release(h.ctx, []redrive.LeaseRef{old.Ref()}, at(70*time.Second)); err != nil {
		h.Fatal(err)
	}
	after := h.item(id)
	if after.State != redrive.StateRunning || after.LeaseOwner != "rescuer" || string(after.Payload) != "in" {
		h.Errorf("item after stale calls = %+v", after)
	}
	h.equalTime("LeaseExpiresAt after stale calls", after.LeaseExpiresAt, before.LeaseExpiresAt)
	if as := h.attempts(id); len(as) != 0 {
		h.Errorf("stale Complete recorded %d attempts", len(as))
	}
	if ls := h.claimAll("p", at(time.Hour)); len(ls) != 0 {
		h.Errorf("running item claimed again: %v", ids(ls))
	}

	// The current token works.
	lost, err = h.s.Heartbeat(h.ctx, []redrive.LeaseRef{cur.Ref()}, at(3*time.Minute))
	if err != nil || len(lost) != 0 {
		h.Errorf("current Heartbeat lost = %v, %v", lost, err)
	}
	lostRec := redrive.Completion{ItemID: id, Token: cur.Token, State: redrive.StatePending, Stage: "a", Attempt: 1,
		NextAt: at(2 * time.Minute), Now: at(time.Minute),
		Record: redrive.Attempt{Stage: "a", Number: 1, Outcome: redrive.OutcomeLost, Class: redrive.ClassLost, Error: "lease expired"}}
	if ap := h.complete(lostRec); !ap[0] {
		h.Fatalf("current Complete not applied")
	}
	if ap := h.complete(lostRec); ap[0] {
		h.Errorf("Complete applied twice")
	}
	as := h.attempts(id)
	if len(as) != 1 || as[0].Outcome != redrive.OutcomeLost {
		h.Errorf("attempts = %+v, want one lost", as)
	}
	// Tokens stay unique over the item's life.
	ls = h.claimAll("p", at(2*time.Minute))
	if len(ls) != 1 || ls[0].Token == cur.Token || ls[0].Token == old.Token {
		h.Errorf("reclaim = %+v, want a third token (had %d, %d)", ls, old.Token, cur.Token)
	}
	if ap := h.complete(succeed(old, at(3*time.Minute)), succeed(cur, at(3*time.Minute))); ap[0] || ap[1] {
		h.Errorf("old tokens applied after reclaim: %v", ap)
	}
}

func testLeaseUpdatedAt(h *h) {
	r := h.run("p", "")
	id := h.enqueue(r, "a", Base, redrive.NewItem{})[0]
	ls := h.claim(redrive.ClaimRequest{Owner: "w", Pipelines: []string{"p"}, Limit: 1, Now: at(5 * time.Second), LeaseUntil: at(30 * time.Second)})
	if len(ls) != 1 {
		h.Fatalf("claimed %d", len(ls))
	}
	h.equalTime("claimed lease's UpdatedAt", ls[0].Item.UpdatedAt, at(5*time.Second))
	h.equalTime("running item's UpdatedAt", h.item(id).UpdatedAt, at(5*time.Second))
	// Neither a heartbeat nor a start mark moves it.
	if lost, err := h.s.Heartbeat(h.ctx, []redrive.LeaseRef{ls[0].Ref()}, at(40*time.Second)); err != nil || len(lost) != 0 {
		h.Fatalf("Heartbeat lost %v, %v", lost, err)
	}
	if lost, err := h.s.MarkStarted(h.ctx, []redrive.StartMark{{Lease: ls[0].Ref(), At: at(6 * time.Second)}}); err != nil || len(lost) != 0 {
		h.Fatalf("MarkStarted lost %v, %v", lost, err)
	}
	h.equalTime("UpdatedAt after a heartbeat and a start mark", h.item(id).UpdatedAt, at(5*time.Second))
	running := []redrive.State{redrive.StateRunning}
	h.equalIDs("running since the claim", itemIDs(h.list(redrive.ItemFilter{States: running, Since: at(5 * time.Second)})), []int64{id})
	h.equalIDs("running until the claim", itemIDs(h.list(redrive.ItemFilter{States: running, Until: at(5 * time.Second)})), nil)
	// A take-over begins a new lease.
	ex, err := h.s.ClaimExpired(h.ctx, redrive.ClaimRequest{Owner: "rescuer", Pipelines: []string{"p"}, Limit: 1,
		Now: at(time.Minute), LeaseUntil: at(2 * time.Minute)})
	if err != nil || len(ex) != 1 {
		h.Fatalf("ClaimExpired = %v, %v; want the item", ids(ex), err)
	}
	h.equalTime("taken-over lease's UpdatedAt", ex[0].Item.UpdatedAt, at(time.Minute))
	h.equalTime("UpdatedAt after the take-over", h.item(id).UpdatedAt, at(time.Minute))
	// The way out of the lease sets it as before.
	if ap := h.complete(succeed(ex[0], at(70*time.Second))); !ap[0] {
		h.Fatalf("Complete not applied")
	}
	h.equalTime("succeeded item's UpdatedAt", h.item(id).UpdatedAt, at(70*time.Second))
}

func testHeartbeat(h *h) {
	r := h.run("p", "")
	idsIn := h.enqueueN(r, "a", Base, 2)
	ls := h.claim(redrive.ClaimRequest{Pipelines: []string{"p"}, Limit: 2, Now: Base, LeaseUntil: at(time.Minute)})
	lost, err := h.s.Heartbeat(h.ctx, []redrive.LeaseRef{ls[0].Ref(), ls[1].Ref()}, at(5*time.Minute))
	if err != nil || len(lost) != 0 {
		h.Fatalf("Heartbeat = %v, %v", lost, err)
	}
	for _, id := range idsIn {
		h.equalTime("extended lease", h.item(id).LeaseExpiresAt, at(5*time.Minute))
	}
	ex, err := h.s.ClaimExpired(h.ctx, redrive.ClaimRequest{Pipelines: []string{"p"}, Limit: 10, Now: at(2 * time.Minute), LeaseUntil: at(3 * time.Minute)})
	if err != nil || len(ex) != 0 {
		h.Errorf("ClaimExpired after heartbeat = %v, %v; want none", ids(ex), err)
	}
	// A finished item's lease is lost.
	h.complete(succeed(ls[0], at(time.Minute)))
	lost, err = h.s.Heartbeat(h.ctx, []redrive.LeaseRef{ls[0].Ref(), ls[1].Ref()}, at(6*time.Minute))
	if err != nil || !slices.Equal(lost, []int64{ls[0].Item.ID}) {
		h.Errorf("Heartbeat after completion lost = %v, %v; want [%d]", lost, err, ls[0].Item.ID)
	}
	ex, err = h.s.ClaimExpired(h.ctx, redrive.ClaimRequest{Pipelines: []string{"p"}, Limit: 10, Now: at(7 * time.Minute), LeaseUntil: at(8 * time.Minute)})
	if err != nil || !slices.Equal(ids(ex), []int64{ls[1].Item.ID}) {
		h.Errorf("ClaimExpired = %v, %v; want [%d]", ids(ex), err, ls[1].Item.ID)
	}
	if lost, err := h.s.Heartbeat(h.ctx, nil, at(time.Hour)); err != nil || len(lost) != 0 {
		h.Errorf("Heartbeat(nil) = %v, %v", lost, err)
	}
}

func testRelease(h *h) {
	r := h.run("p", "")
	id := h.enqueueN(r, "a", Base, 1)[0]
	ls := h.claimAll("p", Base)
	c := retry(ls[0], Base, at(time.Second), "x")
	h.complete(c)
	ls = h.claimAll("p", at(time.Second))
	if err := h.s.Release(h.ctx, []redrive.LeaseRef{ls[0].Ref()}, at(10*time.Second)); err != nil {
		h.Fatal(err)
	}
	it := h.item(id)
	if it.State != redrive.StatePending || it.LeaseOwner != "" || !it.LeaseExpiresAt.IsZero() || it.Attempt != 1 {
		h.Errorf("released item = %+v", it)
	}
	h.equalTime("released NextAt", it.NextAt, at(10*time.Second))
	if as := h.attempts(id); len(as) != 1 {
		h.Errorf("Release recorded an attempt: %d attempts", len(as))
	}
	if ap := h.complete(succeed(ls[0], at(11*time.Second))); ap[0] {
		h.Errorf("Complete applied after Release")
	}
	if ls := h.claimAll("p", at(5*time.Second)); len(ls) != 0 {
		h.Errorf("released item claimed before it was due")
	}
	again := h.claimAll("p", at(10*time.Second))
	if len(again) != 1 || again[0].Token == ls[0].Token {
		h.Errorf("reclaim after Release = %+v", again)
	}
	if err := h.s.Release(h.ctx, []redrive.LeaseRef{ls[0].Ref()}, at(20*time.Second)); err != nil {
		h.Fatal(err)
	}
	if it := h.item(id); it.State != redrive.StateRunning {
		h.Errorf("stale Release changed the item: %s", it.State)
	}
}

func testCompleteStates(h *h) {
	r := h.run("p", "")
	in := h.enqueue(r, "a", Base, redrive.NewItem{Payload: []byte("in0")}, redrive.NewItem{Payload: []byte("in1")},
		redrive.NewItem{Payload: []byte("in2")}, redrive.NewItem{Payload: []byte("in3")})
	ls := h.claimAll("p", Base)
	byID := map[int64]redrive.Lease{}
	for _, l := range ls {
		byID[l.Item.ID] = l
	}
	t1 := at(time.Second + 1234567*time.Nanosecond/1000*1000) // microsecond precision

	// Next stage with a new payload, and an attempt record with every field.
	adv := advance(byID[in[0]], t1, "b", []byte("out-a"))
	adv.NextAt = at(time.Minute)
	adv.Record.StartedAt = at(time.Second)
	adv.Record.FinishedAt = t1
	adv.Record.Delay = 1500 * time.Millisecond
	// Retry without a payload: the payload is kept.
	rt := retry(byID[in[1]], t1, at(2*time.Minute), "503 busy")
	rt.RateLimitWaits = 2
	// Succeeded with the last stage's output.
	sc := succeed(byID[in[2]], t1)
	sc.Payload = []byte("final")
	// Dead with a reason.
	dd := kill(byID[in[3]], t1, "final", "400 bad request")
	ap := h.complete(adv, rt, sc, dd)
	if !slices.Equal(ap, []bool{true, true, true, true}) {
		h.Fatalf("applied = %v", ap)
	}

	it := h.item(in[0])
	if it.State != redrive.StatePending || it.Stage != "b" || it.StageIndex != 1 || it.Attempt != 0 ||
		string(it.Payload) != "out-a" || string(it.Input) != "in0" || it.LeaseOwner != "" || it.Reason != nil {
		h.Errorf("advanced item = %+v", it)
	}
	h.equalTime("advanced NextAt", it.NextAt, at(time.Minute))
	h.equalTime("advanced UpdatedAt", it.UpdatedAt, t1)
	h.equalTime("advanced EnqueuedAt", it.EnqueuedAt, Base)
	as := h.attempts(in[0])
	if len(as) != 1 {
		h.Fatalf("attempts = %+v", as)
	}
	a := as[0]
	if a.ID == 0 || a.ItemID != in[0] || a.RunID != r.ID || a.Pipeline != "p" || a.Stage != "a" || a.StageIndex != 0 ||
		a.Number != 1 || a.Outcome != redrive.OutcomeSucceeded || a.Delay != 1500*time.Millisecond {
		h.Errorf("attempt = %+v", a)
	}
	h.equalTime("attempt StartedAt", a.StartedAt, at(time.Second))
	h.equalTime("attempt FinishedAt", a.FinishedAt, t1)

	it = h.item(in[1])
	if it.State != redrive.StatePending || it.Stage != "a" || it.Attempt != 1 || it.RateLimitWaits != 2 || string(it.Payload) != "in1" {
		h.Errorf("retried item = %+v", it)
	}
	h.equalTime("retry NextAt", it.NextAt, at(2*time.Minute))
	if as := h.attempts(in[1]); len(as) != 1 || as[0].Outcome != redrive.OutcomeRetry || as[0].Error != "503 busy" || as[0].Class != "retryable" {
		h.Errorf("retry attempts = %+v", as)
	}

	it = h.item(in[2])
	if it.State != redrive.StateSucceeded || string(it.Payload) != "final" || it.LeaseOwner != "" || !it.LeaseExpiresAt.IsZero() || it.Reason != nil {
		h.Errorf("succeeded item = %+v", it)
	}

	it = h.item(in[3])
	if it.State != redrive.StateDead || it.Reason == nil || it.LeaseOwner != "" {
		h.Fatalf("dead item = %+v", it)
	}
	if rs := *it.Reason; rs.Stage != "a" || rs.Class != "final" || rs.Error != "400 bad request" || rs.Attempts != 1 {
		h.Errorf("dead reason = %+v", rs)
	}
	h.equalTime("dead reason At", it.Reason.At, t1)

	// Canceled, from a second stage.
	ls = h.claimAll("p", at(time.Minute))
	if len(ls) != 1 || ls[0].Item.ID != in[0] || ls[0].Item.Stage != "b" || string(ls[0].Item.Payload) != "out-a" {
		h.Fatalf("claim at stage b = %+v", ls)
	}
	cn := redrive.Completion{ItemID: in[0], Token: ls[0].Token, State: redrive.StateCanceled, Stage: "b", StageIndex: 1,
		Attempt: 1, Now: at(time.Minute),
		Reason: &redrive.Reason{Stage: "b", Class: redrive.ClassCanceled, Error: "run aborted", Attempts: 1, At: at(time.Minute)},
		Record: redrive.Attempt{Stage: "b", StageIndex: 1, Number: 1, Outcome: redrive.OutcomeDead, Class: redrive.ClassCanceled, Error: "run aborted"}}
	if ap := h.complete(cn); !ap[0] {
		h.Fatal("cancel not applied")
	}
	it = h.item(in[0])
	if it.State != redrive.StateCanceled || it.Reason == nil || it.Reason.Class != redrive.ClassCanceled || it.Reason.Stage != "b" {
		h.Errorf("canceled item = %+v", it)
	}
	if as := h.attempts(in[0]); len(as) != 2 || as[1].Stage != "b" || as[1].StageIndex != 1 {
		h.Errorf("attempts over two stages = %+v", as)
	}
	if c := h.getRun(r.ID).Counts; c != (redrive.Counts{Total: 4, Pending: 1, Succeeded: 1, Dead: 1, Canceled: 1}) {
		h.Errorf("counts = %+v", c)
	}
	if _, err := h.s.Complete(h.ctx, nil); err != nil {
		h.Errorf("Complete(nil) = %v", err)
	}
}

func testCompleteBatch(h *h) {
	r := h.run("p", "")
	h.enqueueN(r, "a", Base, 5)
	ls := h.claimAll("p", Base)
	// A stale token in the middle of a batch does not stop the others.
	stale := ls[2]
	stale.Token += 1000
	ap := h.complete(succeed(ls[0], at(time.Second)), succeed(ls[1], at(time.Second)), succeed(stale, at(time.Second)),
		succeed(ls[3], at(time.Second)), redrive.Completion{ItemID: 999999, Token: 1, State: redrive.StateSucceeded, Now: at(time.Second)})
	if !slices.Equal(ap, []bool{true, true, false, true, false}) {
		h.Errorf("applied = %v", ap)
	}
	if as := h.attempts(ls[2].Item.ID); len(as) != 0 {
		h.Errorf("non-applied completion recorded %d attempts", len(as))
	}
	if it := h.item(ls[2].Item.ID); it.State != redrive.StateRunning {
		h.Errorf("stale completion changed state to %s", it.State)
	}
	if c := h.getRun(r.ID).Counts; c.Succeeded != 3 || c.Running != 2 || c.Total != 5 {
		h.Errorf("counts = %+v", c)
	}
	// The same lease twice in one call: the first completion fences the
	// second, as if they were sequential.
	ap = h.complete(retry(ls[4], at(2*time.Second), at(time.Hour), "first"), succeed(ls[4], at(2*time.Second)))
	if !slices.Equal(ap, []bool{true, false}) {
		h.Errorf("duplicate completion applied = %v, want [true false]", ap)
	}
	if it := h.item(ls[4].Item.ID); it.State != redrive.StatePending {
		h.Errorf("duplicate completion: state %s, want pending", it.State)
	}
	if as := h.attempts(ls[4].Item.ID); len(as) != 1 || as[0].Error != "first" {
		h.Errorf("duplicate completion attempts = %+v", as)
	}
}

func checkCounts(h *h, c redrive.Counts) {
	h.Helper()
	if !c.AddsUp() {
		h.Errorf("counts do not add up: %+v", c)
	}
}

func testCountsAddUp(h *h) {
	r := h.run("p", "")
	other := h.run("q", "")
	h.enqueueN(other, "a", Base, 4)
	h.enqueueN(r, "a", Base, 20)
	h.enqueue(r, "a", Base, redrive.NewItem{Invalid: "bad"}, redrive.NewItem{Invalid: "bad"})
	checkCounts(h, h.getRun(r.ID).Counts)
	ls := h.claim(redrive.ClaimRequest{Pipelines: []string{"p"}, Limit: 15, Now: Base})
	var cs []redrive.Completion
	for i, l := range ls {
		switch i % 5 {
		case 0:
			cs = append(cs, succeed(l, at(time.Second)))
		case 1:
			cs = append(cs, retry(l, at(time.Second), at(time.Minute), "e"))
		case 2:
			cs = append(cs, kill(l, at(time.Second), "final", "e"))
		case 3:
			cs = append(cs, advance(l, at(time.Second), "b", nil))
		}
		// i%5 == 4 stays running.
	}
	h.complete(cs...)
	n, err := h.s.CancelPending(h.ctx, redrive.ItemFilter{RunID: r.ID, Limit: 2}, redrive.Reason{Class: redrive.ClassCanceled, Error: "stop", At: at(2 * time.Second)})
	if err != nil || n != 2 {
		h.Fatalf("CancelPending = %d, %v", n, err)
	}
	c := h.getRun(r.ID).Counts
	checkCounts(h, c)
	want := redrive.Counts{Total: 22, Succeeded: 3, Dead: 3 + 2, Running: 3, Canceled: 2}
	want.Pending = want.Total - want.Succeeded - want.Dead - want.Running - want.Canceled
	if c != want {
		h.Errorf("counts = %+v, want %+v", c, want)
	}
	runs, err := h.s.ListRuns(h.ctx, redrive.RunFilter{})
	if err != nil {
		h.Fatal(err)
	}
	for _, run := range runs {
		checkCounts(h, run.Counts)
		if run.ID == r.ID && run.Counts != want {
			h.Errorf("ListRuns counts = %+v, want %+v", run.Counts, want)
		}
		if run.ID == other.ID && run.Counts != (redrive.Counts{Total: 4, Pending: 4}) {
			h.Errorf("other run counts = %+v", run.Counts)
		}
	}
	total := 0
	sc, err := h.s.StateCounts(h.ctx, r.ID)
	if err != nil {
		h.Fatal(err)
	}
	for _, s := range sc {
		total += s.Count
	}
	if total != want.Total {
		h.Errorf("StateCounts total %d, want %d", total, want.Total)
	}
}

func testSetRunStatus(h *h) {
	r := h.run("p", "")
	if err := h.s.SetRunStatus(h.ctx, r.ID, redrive.RunAborted, "failure budget exceeded", at(time.Hour)); err != nil {
		h.Fatal(err)
	}
	got := h.getRun(r.ID)
	if got.Status != redrive.RunAborted || got.Reason != "failure budget exceeded" {
		h.Errorf("aborted run = %+v", got)
	}
	h.equalTime("FinishedAt", got.FinishedAt, at(time.Hour))
	if err := h.s.SetRunStatus(h.ctx, r.ID, redrive.RunRunning, "", at(2*time.Hour)); err != nil {
		h.Fatal(err)
	}
	got = h.getRun(r.ID)
	if got.Status != redrive.RunRunning || !got.FinishedAt.IsZero() || got.Reason != "" {
		h.Errorf("reopened run = %+v", got)
	}
	if err := h.s.SetRunStatus(h.ctx, r.ID, redrive.RunPartialSuccess, "", at(3*time.Hour)); err != nil {
		h.Fatal(err)
	}
	got = h.getRun(r.ID)
	if got.Status != redrive.RunPartialSuccess {
		h.Errorf("status = %s", got.Status)
	}
	h.equalTime("FinishedAt", got.FinishedAt, at(3*time.Hour))
	if err := h.s.SetRunStatus(h.ctx, 424242, redrive.RunCompleted, "", Base); err == nil {
		h.Errorf("SetRunStatus of a missing run succeeded")
	}
}

// FinishRun finishes a running run once: of processes racing to finish
// it, exactly one succeeds, so one RunFinished event is sent.
func testFinishRun(h *h) {
	r := h.run("p", "")
	var wins atomic.Int32
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			status := redrive.RunCompleted
			if i%2 == 1 {
				status = redrive.RunAborted
			}
			ok, err := h.s.FinishRun(h.ctx, r.ID, status, "reason", at(time.Hour))
			if err != nil {
				h.Error(err)
			}
			if ok {
				wins.Add(1)
			}
		})
	}
	wg.Wait()
	if wins.Load() != 1 {
		h.Fatalf("%d of 8 concurrent FinishRun calls won, want exactly 1", wins.Load())
	}
	got := h.getRun(r.ID)
	if got.Status != redrive.RunCompleted && got.Status != redrive.RunAborted {
		h.Errorf("status = %s", got.Status)
	}
	h.equalTime("FinishedAt", got.FinishedAt, at(time.Hour))
	if ok, err := h.s.FinishRun(h.ctx, r.ID, redrive.RunFailed, "", at(2*time.Hour)); ok || err != nil {
		h.Errorf("FinishRun of a finished run = %v, %v; want false, nil", ok, err)
	}
	if _, err := h.s.FinishRun(h.ctx, r.ID, redrive.RunRunning, "", Base); err == nil {
		h.Errorf("FinishRun to running succeeded")
	}
	if _, err := h.s.FinishRun(h.ctx, 424242, redrive.RunCompleted, "", Base); !errors.Is(err, redrive.ErrNotFound) {
		h.Errorf("FinishRun of a missing run: %v, want ErrNotFound", err)
	}
}

func testListRuns(h *h) {
	var all []int64
	for i := range 6 {
		p := "p"
		if i%2 == 1 {
			p = "q"
		}
		all = append(all, h.run(p, "").ID)
	}
	if err := h.s.SetRunStatus(h.ctx, all[0], redrive.RunCompleted, "", at(time.Hour)); err != nil {
		h.Fatal(err)
	}
	if err := h.s.SetRunStatus(h.ctx, all[2], redrive.RunCompleted, "", at(time.Hour)); err != nil {
		h.Fatal(err)
	}
	list := func(f redrive.RunFilter) []int64 {
		h.Helper()
		runs, err := h.s.ListRuns(h.ctx, f)
		if err != nil {
			h.Fatalf("ListRuns(%+v): %v", f, err)
		}
		out := make([]int64, len(runs))
		for i, r := range runs {
			out[i] = r.ID
		}
		return out
	}
	rev := slices.Clone(all)
	slices.Reverse(rev)
	h.equalIDs("all runs newest first", list(redrive.RunFilter{}), rev)
	h.equalIDs("pipeline q", list(redrive.RunFilter{Pipeline: "q"}), []int64{all[5], all[3], all[1]})
	h.equalIDs("completed", list(redrive.RunFilter{Status: redrive.RunCompleted}), []int64{all[2], all[0]})
	h.equalIDs("running of p", list(redrive.RunFilter{Pipeline: "p", Status: redrive.RunRunning}), []int64{all[4]})
	h.equalIDs("limit 2", list(redrive.RunFilter{Limit: 2}), rev[:2])
	h.equalIDs("before", list(redrive.RunFilter{BeforeID: all[2], Limit: 10}), []int64{all[1], all[0]})
}

func testCancelPending(h *h) {
	r := h.run("p", "")
	other := h.run("p", "")
	pend := h.enqueueN(r, "a", Base, 4)
	otherIDs := h.enqueueN(other, "a", Base, 2)
	runIDs := h.enqueueN(r, "a", Base, 1)
	ls := h.claim(redrive.ClaimRequest{Pipelines: []string{"p"}, Only: []redrive.StageKey{{Pipeline: "p", Stage: "a"}}, Limit: 100, Now: Base})
	// Put everything back except the last item of r, which stays running;
	// one item of r moves to stage b.
	for _, l := range ls {
		switch l.Item.ID {
		case runIDs[0]:
		case pend[3]:
			h.complete(advance(l, at(time.Second), "b", nil))
		default:
			if err := h.s.Release(h.ctx, []redrive.LeaseRef{l.Ref()}, Base); err != nil {
				h.Fatal(err)
			}
		}
	}
	reason := redrive.Reason{Class: redrive.ClassCanceled, Error: "aborted: failure budget", At: at(time.Hour)}
	n, err := h.s.CancelPending(h.ctx, redrive.ItemFilter{RunID: r.ID}, reason)
	if err != nil || n != 4 {
		h.Fatalf("CancelPending = %d, %v; want 4", n, err)
	}
	for _, id := range pend {
		it := h.item(id)
		if it.State != redrive.StateCanceled || it.Reason == nil || it.Reason.Class != redrive.ClassCanceled || it.Reason.Error != reason.Error {
			h.Errorf("canceled item = %+v", it)
			continue
		}
		wantStage := "a"
		if id == pend[3] {
			wantStage = "b"
		}
		if it.Reason.Stage != wantStage {
			h.Errorf("reason stage = %q, want the item's stage %q", it.Reason.Stage, wantStage)
		}
		h.equalTime("reason At", it.Reason.At, at(time.Hour))
	}
	if it := h.item(runIDs[0]); it.State != redrive.StateRunning {
		h.Errorf("running item was canceled: %s", it.State)
	}
	for _, id := range otherIDs {
		if it := h.item(id); it.State != redrive.StatePending {
			h.Errorf("item of another run was canceled")
		}
	}
	if n, err := h.s.CancelPending(h.ctx, redrive.ItemFilter{RunID: r.ID}, reason); err != nil || n != 0 {
		h.Errorf("second CancelPending = %d, %v; want 0", n, err)
	}
	if c := h.getRun(r.ID).Counts; c != (redrive.Counts{Total: 5, Canceled: 4, Running: 1}) {
		h.Errorf("counts = %+v", c)
	}
	// Cancel by stage and limit.
	n, err = h.s.CancelPending(h.ctx, redrive.ItemFilter{Pipeline: "p", Stage: "a", Limit: 1}, reason)
	if err != nil || n != 1 {
		h.Errorf("CancelPending limit 1 = %d, %v", n, err)
	}
}

// dlqFixture makes a run whose items end in varied states and reasons. It
// returns the run and the IDs by role.
func dlqFixture(h *h) (redrive.Run, map[string]int64) {
	r := h.run("p", "")
	got := h.enqueue(r, "a", Base,
		redrive.NewItem{Key: "timeout"}, redrive.NewItem{Key: "badreq"}, redrive.NewItem{Key: "percent"},
		redrive.NewItem{Key: "ok"}, redrive.NewItem{Key: "pending"}, redrive.NewItem{Key: "canceled"},
		redrive.NewItem{Key: "stageb"})
	m := map[string]int64{}
	for i, k := range []string{"timeout", "badreq", "percent", "ok", "pending", "canceled", "stageb"} {
		m[k] = got[i]
	}
	ls := h.claim(redrive.ClaimRequest{Pipelines: []string{"p"}, Limit: 100, Now: Base})
	by := map[int64]redrive.Lease{}
	for _, l := range ls {
		by[l.Item.ID] = l
	}
	h.complete(
		kill(by[m["timeout"]], at(1*time.Minute), "retryable", "context deadline exceeded"),
		kill(by[m["badreq"]], at(2*time.Minute), "final", "400 Bad Request"),
		kill(by[m["percent"]], at(3*time.Minute), "final", "disk 100% full"),
		succeed(by[m["ok"]], at(4*time.Minute)),
		retry(by[m["pending"]], at(5*time.Minute), at(24*time.Hour), "503"),
		redrive.Completion{ItemID: m["canceled"], Token: by[m["canceled"]].Token, State: redrive.StateCanceled, Stage: "a",
			Now: at(6 * time.Minute), Reason: &redrive.Reason{Stage: "a", Class: redrive.ClassCanceled, Error: "operator", At: at(6 * time.Minute)},
			Record: redrive.Attempt{Stage: "a", Number: 1, Outcome: redrive.OutcomeDead, Class: redrive.ClassCanceled, Error: "operator"}},
		advance(by[m["stageb"]], at(7*time.Minute), "b", []byte("from a")),
	)
	ls = h.claim(redrive.ClaimRequest{Pipelines: []string{"p"}, Limit: 100, Now: at(7 * time.Minute)})
	if len(ls) != 1 {
		h.Fatalf("fixture: claimed %v at stage b", ids(ls))
	}
	l := ls[0]
	h.complete(retry(l, at(8*time.Minute), at(8*time.Minute), "503"))
	l = h.claim(redrive.ClaimRequest{Pipelines: []string{"p"}, Limit: 100, Now: at(8 * time.Minute)})[0]
	h.complete(kill(l, at(9*time.Minute), "retryable", "context deadline exceeded"))
	if err := h.s.SetRunStatus(h.ctx, r.ID, redrive.RunFailed, "", at(10*time.Minute)); err != nil {
		h.Fatal(err)
	}
	return r, m
}

func testListItemsFilters(h *h) {
	r, m := dlqFixture(h)
	q := h.run("q", "")
	qIDs := h.enqueueN(q, "a", Base, 2)
	dead := []redrive.State{redrive.StateDead}
	cases := []struct {
		name string
		f    redrive.ItemFilter
		want []int64
	}{
		{"all", redrive.ItemFilter{}, append([]int64{m["timeout"], m["badreq"], m["percent"], m["ok"], m["pending"], m["canceled"], m["stageb"]}, qIDs...)},
		{"run", redrive.ItemFilter{RunID: q.ID}, qIDs},
		{"pipeline", redrive.ItemFilter{Pipeline: "q"}, qIDs},
		{"dead", redrive.ItemFilter{RunID: r.ID, States: dead}, []int64{m["timeout"], m["badreq"], m["percent"], m["stageb"]}},
		{"dead or canceled", redrive.ItemFilter{States: []redrive.State{redrive.StateDead, redrive.StateCanceled}},
			[]int64{m["timeout"], m["badreq"], m["percent"], m["canceled"], m["stageb"]}},
		{"succeeded", redrive.ItemFilter{States: []redrive.State{redrive.StateSucceeded}}, []int64{m["ok"]}},
		{"stage", redrive.ItemFilter{Stage: "b"}, []int64{m["stageb"]}},
		{"class", redrive.ItemFilter{States: dead, Class: "final"}, []int64{m["badreq"], m["percent"]}},
		{"error text", redrive.ItemFilter{ErrorContains: "deadline"}, []int64{m["timeout"], m["stageb"]}},
		{"error text is literal", redrive.ItemFilter{ErrorContains: "%"}, []int64{m["percent"]}},
		{"error text is literal 2", redrive.ItemFilter{ErrorContains: "_"}, nil},
		{"error text quote", redrive.ItemFilter{ErrorContains: "'; DROP TABLE items; --"}, nil},
		{"class and stage", redrive.ItemFilter{Class: "retryable", Stage: "a"}, []int64{m["timeout"]}},
		// Since inclusive, Until exclusive, on the reason time of dead items.
		{"since", redrive.ItemFilter{States: dead, Since: at(2 * time.Minute)}, []int64{m["badreq"], m["percent"], m["stageb"]}},
		{"until", redrive.ItemFilter{States: dead, Until: at(3 * time.Minute)}, []int64{m["timeout"], m["badreq"]}},
		{"since until", redrive.ItemFilter{States: dead, Since: at(2 * time.Minute), Until: at(9 * time.Minute)}, []int64{m["badreq"], m["percent"]}},
		{"since on updated time", redrive.ItemFilter{States: []redrive.State{redrive.StateSucceeded, redrive.StatePending}, Since: at(4 * time.Minute), Until: at(5 * time.Minute)}, []int64{m["ok"]}},
		{"after ID", redrive.ItemFilter{RunID: r.ID, AfterID: m["pending"]}, []int64{m["canceled"], m["stageb"]}},
		{"limit", redrive.ItemFilter{RunID: r.ID, Limit: 2}, []int64{m["timeout"], m["badreq"]}},
		{"nothing", redrive.ItemFilter{Pipeline: "nope"}, nil},
	}
	for _, tc := range cases {
		h.equalIDs("ListItems "+tc.name, itemIDs(h.list(tc.f)), tc.want)
		want := len(tc.want)
		if n := h.count(tc.f); n != want {
			h.Errorf("Count %s = %d, want %d", tc.name, n, want)
		}
	}
	for _, it := range h.list(redrive.ItemFilter{States: dead}) {
		if it.Reason == nil {
			h.Errorf("dead item %d has no reason", it.ID)
		}
	}
}

func testListItemsPaging(h *h) {
	r := h.run("p", "")
	all := h.enqueueN(r, "a", Base, 150)
	if got := h.list(redrive.ItemFilter{}); len(got) != 100 {
		h.Errorf("ListItems default limit returned %d, want 100", len(got))
	}
	var got []int64
	after := int64(0)
	for range 100 {
		page := h.list(redrive.ItemFilter{RunID: r.ID, AfterID: after, Limit: 7})
		if len(page) == 0 {
			break
		}
		if len(page) > 7 {
			h.Fatalf("page of %d", len(page))
		}
		got = append(got, itemIDs(page)...)
		after = page[len(page)-1].ID
	}
	h.equalIDs("paged", got, all)
	if n := h.count(redrive.ItemFilter{Limit: 10}); n != 10 {
		h.Errorf("Count with Limit 10 = %d", n)
	}
}

// testListItemsRunPaging pages through a run whose items are in several
// states and interleaved with another run's, by run alone, by states (one
// named twice) and with another condition: every page in ID order, nothing
// missed or repeated, the other run's items never shown.
func testListItemsRunPaging(h *h) {
	r, o := h.run("p", ""), h.run("o", "")
	var mine []int64
	for range 6 {
		mine = append(mine, h.enqueueN(r, "a", Base, 9)...)
		h.enqueueN(o, "a", Base, 5)
	}
	mine = append(mine, h.enqueueN(r, "b", Base, 4)...)
	h.enqueueN(o, "a", Base, 40) // the table goes on past the run
	state := map[int64]redrive.State{}
	for _, id := range mine {
		state[id] = redrive.StatePending
	}
	var cs []redrive.Completion
	for i, l := range h.claimAll("p", Base) {
		switch i % 3 {
		case 0:
			cs = append(cs, succeed(l, Base))
			state[l.Item.ID] = redrive.StateSucceeded
		case 1:
			cs = append(cs, kill(l, Base, "final", "bad"))
			state[l.Item.ID] = redrive.StateDead
		default:
			state[l.Item.ID] = redrive.StateRunning // stays leased
		}
	}
	h.complete(cs...)
	for _, tc := range []struct {
		name string
		f    redrive.ItemFilter
		want func(id int64) bool
	}{
		{"run", redrive.ItemFilter{RunID: r.ID}, func(int64) bool { return true }},
		{"states", redrive.ItemFilter{RunID: r.ID, States: []redrive.State{redrive.StateSucceeded, redrive.StateRunning, redrive.StateSucceeded}},
			func(id int64) bool { return state[id] == redrive.StateSucceeded || state[id] == redrive.StateRunning }},
		{"stage", redrive.ItemFilter{RunID: r.ID, Stage: "b"}, func(id int64) bool { return id >= mine[len(mine)-4] }},
	} {
		var want []int64
		for _, id := range mine {
			if tc.want(id) {
				want = append(want, id)
			}
		}
		for _, limit := range []int{1, 4, 7, len(want), len(want) + 1} {
			var got []int64
			after := int64(0)
			for range len(want) + 2 {
				f := tc.f
				f.AfterID, f.Limit = after, limit
				page := h.list(f)
				if len(page) > limit {
					h.Fatalf("%s: page of %d, limit %d", tc.name, len(page), limit)
				}
				got = append(got, itemIDs(page)...)
				if len(page) < limit {
					break
				}
				after = page[len(page)-1].ID
			}
			h.equalIDs(fmt.Sprintf("%s, pages of %d", tc.name, limit), got, want)
		}
	}
}

func testAttempts(h *h) {
	r := h.run("p", "")
	id := h.enqueueN(r, "a", Base, 1)[0]
	now := Base
	for i := range 3 {
		l := h.claimAll("p", now)[0]
		if l.Item.Attempt != i {
			h.Errorf("attempt counter = %d, want %d", l.Item.Attempt, i)
		}
		h.complete(retry(l, now, now.Add(time.Second), fmt.Sprintf("err %d", i+1)))
		now = now.Add(time.Second)
	}
	l := h.claimAll("p", now)[0]
	h.complete(advance(l, now, "b", nil))
	l = h.claimAll("p", now)[0]
	h.complete(succeed(l, now))
	as := h.attempts(id)
	if len(as) != 5 {
		h.Fatalf("%d attempts, want 5", len(as))
	}
	wantNum := []int{1, 2, 3, 4, 1}
	wantStage := []string{"a", "a", "a", "a", "b"}
	for i, a := range as {
		if a.Number != wantNum[i] || a.Stage != wantStage[i] {
			h.Errorf("attempt %d = %s #%d, want %s #%d", i, a.Stage, a.Number, wantStage[i], wantNum[i])
		}
		if i > 0 && a.ID <= as[i-1].ID {
			h.Errorf("attempt IDs not increasing")
		}
	}
	if as[0].Error != "err 1" || as[2].Error != "err 3" || as[4].Outcome != redrive.OutcomeSucceeded {
		h.Errorf("attempts = %+v", as)
	}
	// A record that leaves out its item, run and pipeline has them filled
	// from the item, in a batch beside one that names them.
	ids := h.enqueueN(r, "a", now, 2)
	ls := h.claim(redrive.ClaimRequest{Pipelines: []string{"p"}, Limit: 2, Now: now})
	if len(ls) != 2 {
		h.Fatalf("claimed %d, want 2", len(ls))
	}
	named := succeed(ls[1], now)
	named.Record.ItemID, named.Record.RunID, named.Record.Pipeline = ls[1].Item.ID, r.ID, "p"
	h.complete(succeed(ls[0], now), named)
	for _, id := range ids {
		if as := h.attempts(id); len(as) != 1 || as[0].ItemID != id || as[0].RunID != r.ID || as[0].Pipeline != "p" {
			h.Errorf("item %d: attempts %+v, want one of run %d, pipeline p", id, as, r.ID)
		}
	}
}

func testStateCounts(h *h) {
	r := h.run("p", "")
	q := h.run("q", "")
	h.enqueueN(r, "a", Base, 3)
	h.enqueueN(q, "x", Base, 2)
	ls := h.claim(redrive.ClaimRequest{Pipelines: []string{"p"}, Limit: 2, Now: Base})
	h.complete(advance(ls[0], Base, "b", nil))
	sc, err := h.s.StateCounts(h.ctx, r.ID)
	if err != nil {
		h.Fatal(err)
	}
	got := map[redrive.StateCount]bool{}
	for _, c := range sc {
		got[c] = true
	}
	want := []redrive.StateCount{
		{Pipeline: "p", Stage: "a", State: redrive.StatePending, Count: 1},
		{Pipeline: "p", Stage: "a", State: redrive.StateRunning, Count: 1},
		{Pipeline: "p", Stage: "b", State: redrive.StatePending, Count: 1},
	}
	if len(sc) != len(want) {
		h.Errorf("StateCounts(run) = %+v, want %+v", sc, want)
	}
	for _, w := range want {
		if !got[w] {
			h.Errorf("StateCounts(run) = %+v, missing %+v", sc, w)
		}
	}
	all, err := h.s.StateCounts(h.ctx, 0)
	if err != nil {
		h.Fatal(err)
	}
	if len(all) != 4 || !slices.Contains(all, redrive.StateCount{Pipeline: "q", Stage: "x", State: redrive.StatePending, Count: 2}) {
		h.Errorf("StateCounts(all) = %+v", all)
	}
}

func testRetryHistogram(h *h) {
	r := h.run("p", "")
	other := h.run("p", "")
	h.enqueueN(other, "a", Base, 1) // stays pending, another run
	in := h.enqueueN(r, "a", Base, 6)
	h.enqueue(r, "a", Base, redrive.NewItem{Invalid: "bad"}) // finished with 0 attempts
	now := Base
	step := func(id int64, f func(l redrive.Lease) redrive.Completion) {
		h.Helper()
		for _, l := range h.claim(redrive.ClaimRequest{Pipelines: []string{"p"}, Limit: 100, Now: now}) {
			if l.Item.ID == id {
				h.complete(f(l))
			} else if err := h.s.Release(h.ctx, []redrive.LeaseRef{l.Ref()}, now); err != nil {
				h.Fatal(err)
			}
		}
	}
	ok := func(l redrive.Lease) redrive.Completion { return succeed(l, now) }
	again := func(l redrive.Lease) redrive.Completion { return retry(l, now, now, "e") }
	wait := func(l redrive.Lease) redrive.Completion {
		c := retry(l, now, now, "429")
		c.Attempt = l.Item.Attempt
		c.RateLimitWaits = l.Item.RateLimitWaits + 1
		c.Record.Outcome = redrive.OutcomeRateLimited
		c.Record.Class = "rate_limited"
		return c
	}
	next := func(l redrive.Lease) redrive.Completion { return advance(l, now, "b", nil) }
	die := func(l redrive.Lease) redrive.Completion { return kill(l, now, "final", "e") }
	// in[0]: 1 attempt → 0 retries.
	step(in[0], ok)
	// in[1]: retry, retry, ok → 2.
	step(in[1], again)
	step(in[1], again)
	step(in[1], ok)
	// in[2]: rate limited twice, ok → 0.
	step(in[2], wait)
	step(in[2], wait)
	step(in[2], ok)
	// in[3]: a ok, b retry, b ok → 1.
	step(in[3], next)
	step(in[3], again)
	step(in[3], ok)
	// in[4]: retry, retry, dead → 2.
	step(in[4], again)
	step(in[4], again)
	step(in[4], die)
	// in[5]: retry, then still pending → not counted.
	step(in[5], again)

	hist, err := h.s.RetryHistogram(h.ctx, r.ID)
	if err != nil {
		h.Fatal(err)
	}
	want := []redrive.HistogramBucket{{Retries: 0, Items: 3}, {Retries: 1, Items: 1}, {Retries: 2, Items: 2}}
	if !slices.Equal(hist, want) {
		h.Errorf("RetryHistogram = %+v, want %+v", hist, want)
	}
	all, err := h.s.RetryHistogram(h.ctx, 0)
	if err != nil {
		h.Fatal(err)
	}
	if !slices.Equal(all, want) {
		h.Errorf("RetryHistogram(all) = %+v, want %+v", all, want)
	}
	if hist, err := h.s.RetryHistogram(h.ctx, other.ID); err != nil || len(hist) != 0 {
		h.Errorf("RetryHistogram(no finished items) = %+v, %v", hist, err)
	}
}

func testTopErrors(h *h) {
	r := h.run("p", "")
	q := h.run("q", "")
	h.enqueueN(r, "a", Base, 10)
	h.enqueueN(q, "a", Base, 2)
	ls := h.claim(redrive.ClaimRequest{Pipelines: []string{"p"}, Limit: 10, Now: Base})
	var cs []redrive.Completion
	for i, l := range ls {
		switch {
		case i < 4:
			cs = append(cs, retry(l, Base, Base, "timeout"))
		case i < 6:
			cs = append(cs, retry(l, Base, Base, "503"))
		case i < 7:
			cs = append(cs, kill(l, Base, "final", "400"))
		case i < 8:
			cs = append(cs, succeed(l, Base))
		default:
			cs = append(cs, advance(l, Base, "b", nil))
		}
	}
	h.complete(cs...)
	// Stage b: one error.
	for _, l := range h.claim(redrive.ClaimRequest{Pipelines: []string{"p"}, Only: []redrive.StageKey{{Pipeline: "p", Stage: "b"}}, Limit: 1, Now: Base}) {
		h.complete(retry(l, Base, Base, "b broke"))
	}
	for _, l := range h.claim(redrive.ClaimRequest{Pipelines: []string{"q"}, Limit: 10, Now: Base}) {
		h.complete(retry(l, Base, Base, "q broke"))
	}
	te, err := h.s.TopErrors(h.ctx, redrive.ErrorFilter{RunID: r.ID})
	if err != nil {
		h.Fatal(err)
	}
	want := []redrive.ErrorCount{
		{Pipeline: "p", Stage: "a", Class: "retryable", Error: "timeout", Count: 4},
		{Pipeline: "p", Stage: "a", Class: "retryable", Error: "503", Count: 2},
		{Pipeline: "p", Stage: "a", Class: "final", Error: "400", Count: 1},
		{Pipeline: "p", Stage: "b", Class: "retryable", Error: "b broke", Count: 1},
	}
	if !slices.Equal(te, want) {
		h.Errorf("TopErrors = %+v, want %+v", te, want)
	}
	te, err = h.s.TopErrors(h.ctx, redrive.ErrorFilter{Pipeline: "p", Limit: 1})
	if err != nil {
		h.Fatal(err)
	}
	if !slices.Equal(te, []redrive.ErrorCount{want[0], want[3]}) {
		h.Errorf("TopErrors limit 1 = %+v", te)
	}
	te, err = h.s.TopErrors(h.ctx, redrive.ErrorFilter{})
	if err != nil {
		h.Fatal(err)
	}
	if len(te) != 5 || !slices.Contains(te, redrive.ErrorCount{Pipeline: "q", Stage: "a", Class: "retryable", Error: "q broke", Count: 2}) {
		h.Errorf("TopErrors(all) = %+v", te)
	}
}

func testOldestDue(h *h) {
	due := func(now time.Time) time.Time {
		h.Helper()
		t, err := h.s.OldestDue(h.ctx, now)
		if err != nil {
			h.Fatal(err)
		}
		return t
	}
	if t := due(Base); !t.IsZero() {
		h.Errorf("OldestDue(empty) = %v", t)
	}
	r := h.run("p", "")
	h.enqueueN(r, "a", at(time.Minute), 1)
	h.enqueueN(r, "a", at(2*time.Minute), 1)
	if t := due(Base); !t.IsZero() {
		h.Errorf("OldestDue before anything is due = %v", t)
	}
	h.equalTime("OldestDue", due(at(90*time.Second)), at(time.Minute))
	h.equalTime("OldestDue", due(at(time.Hour)), at(time.Minute))
	// A running item is not due.
	ls := h.claim(redrive.ClaimRequest{Pipelines: []string{"p"}, Limit: 1, Now: at(time.Hour)})
	h.equalTime("OldestDue after claim", due(at(time.Hour)), at(2*time.Minute))
	h.complete(retry(ls[0], at(time.Hour), at(3*time.Hour), "e"))
	h.equalTime("OldestDue with a later retry", due(at(time.Hour)), at(2*time.Minute))
}

// testOldestDueReady: the ready item due longest is found wherever it
// sits in claim order: behind retries ordered before it that came due
// after it, at a lower priority, or ordered after its own due time.
func testOldestDueReady(h *h) {
	r := h.run("p", "")
	now := at(time.Hour)
	h.enqueueN(r, "a", at(10*time.Minute), 300)
	ls := h.claimAll("p", at(10*time.Minute))
	cs := make([]redrive.Completion, len(ls))
	for i, l := range ls {
		cs[i] = retry(l, at(40*time.Minute), at(40*time.Minute), "e")
	}
	h.complete(cs...)
	h.equalTime("OldestDue of ready retries", zeroOr(h, now), at(40*time.Minute))
	// Due at 20m, behind the 300 retries (ordered at 10m) in claim order.
	h.enqueue(r, "a", at(20*time.Minute), redrive.NewItem{Payload: []byte("behind")})
	h.equalTime("OldestDue behind retries", zeroOr(h, now), at(20*time.Minute))
	h.enqueue(r, "a", at(15*time.Minute), redrive.NewItem{Payload: []byte("low"), Priority: -1})
	h.equalTime("OldestDue at a lower priority", zeroOr(h, now), at(15*time.Minute))
	h.enqueue(r, "a", at(12*time.Minute), redrive.NewItem{Payload: []byte("later order"), OrderAt: at(2 * time.Hour)})
	h.equalTime("OldestDue ordered after its due time", zeroOr(h, now), at(12*time.Minute))
	if t := zeroOr(h, at(11*time.Minute)); !t.IsZero() {
		h.Errorf("OldestDue before any ready item is due = %v", t)
	}
	if got := h.claimAll("p", now); len(got) != 303 {
		h.Fatalf("claimed %d of 303 ready items", len(got))
	}
	if t := zeroOr(h, now); !t.IsZero() {
		h.Errorf("OldestDue with every item running = %v", t)
	}
}

func testRedrive(h *h) {
	r, m := dlqFixture(h)
	dead := []int64{m["timeout"], m["badreq"], m["percent"], m["stageb"]}
	histBefore := map[int64]int{}
	for _, id := range dead {
		histBefore[id] = len(h.attempts(id))
	}
	f := redrive.ItemFilter{RunID: r.ID}
	if n := h.count(redrive.ItemFilter{RunID: r.ID, States: []redrive.State{redrive.StateDead}}); n != 4 {
		h.Fatalf("dry run count = %d", n)
	}
	now := at(time.Hour)
	n, err := h.s.Redrive(h.ctx, f, now, 10*time.Second)
	if err != nil || n != 4 {
		h.Fatalf("Redrive = %d, %v; want 4", n, err)
	}
	for i, id := range dead {
		it := h.item(id)
		if it.State != redrive.StatePending || it.Attempt != 0 || it.RateLimitWaits != 0 || it.Reason != nil || it.LeaseOwner != "" {
			h.Errorf("redriven item = %+v", it)
		}
		h.equalTime("redriven NextAt", it.NextAt, now.Add(time.Duration(i)*10*time.Second))
		if got := len(h.attempts(id)); got != histBefore[id] {
			h.Errorf("redrive changed history: %d attempts, had %d", got, histBefore[id])
		}
	}
	if it := h.item(m["stageb"]); it.Stage != "b" || it.StageIndex != 1 || string(it.Payload) != "from a" {
		h.Errorf("redriven item lost its stage or payload: %+v", it)
	}
	if it := h.item(m["canceled"]); it.State != redrive.StateCanceled {
		h.Errorf("canceled item redriven by default")
	}
	got := h.getRun(r.ID)
	if got.Status != redrive.RunRunning || !got.FinishedAt.IsZero() {
		h.Errorf("run not reopened: %+v", got)
	}
	checkCounts(h, got.Counts)
	if got.Counts.Dead != 0 || got.Counts.Pending != 5 {
		h.Errorf("counts after redrive = %+v", got.Counts)
	}
	// Spread: only the first is due at now.
	ls := h.claimAll("p", now)
	h.equalIDs("due at redrive time", ids(ls), dead[:1])
	if len(ls) == 1 && ls[0].Item.Attempt != 0 {
		h.Errorf("redriven attempt counter = %d", ls[0].Item.Attempt)
	}

	// Canceled items when named.
	n, err = h.s.Redrive(h.ctx, redrive.ItemFilter{States: []redrive.State{redrive.StateCanceled}}, now, 0)
	if err != nil || n != 1 {
		h.Errorf("Redrive(canceled) = %d, %v", n, err)
	}
	if it := h.item(m["canceled"]); it.State != redrive.StatePending {
		h.Errorf("canceled item not redriven: %s", it.State)
	}
	h.equalTime("interval 0 NextAt", h.item(m["canceled"]).NextAt, now)
	// Other states are refused.
	for _, st := range []redrive.State{redrive.StatePending, redrive.StateSucceeded, redrive.StateRunning} {
		if _, err := h.s.Redrive(h.ctx, redrive.ItemFilter{States: []redrive.State{st}}, now, 0); err == nil {
			h.Errorf("Redrive of %s items succeeded", st)
		}
	}
	if it := h.item(m["ok"]); it.State != redrive.StateSucceeded {
		h.Errorf("succeeded item touched: %s", it.State)
	}
	if n, err := h.s.Redrive(h.ctx, f, now, 0); err != nil || n != 0 {
		h.Errorf("second Redrive = %d, %v; want 0", n, err)
	}
}

func testRedriveFilters(h *h) {
	r, m := dlqFixture(h)
	now := at(time.Hour)
	f := redrive.ItemFilter{RunID: r.ID, Class: "final", ErrorContains: "Bad"}
	if n := h.count(redrive.ItemFilter{RunID: r.ID, Class: "final", ErrorContains: "Bad", States: []redrive.State{redrive.StateDead}}); n != 1 {
		h.Errorf("dry-run Count = %d, want 1", n)
	}
	n, err := h.s.Redrive(h.ctx, f, now, time.Second)
	if err != nil || n != 1 {
		h.Fatalf("Redrive(class, error) = %d, %v; want 1", n, err)
	}
	if it := h.item(m["badreq"]); it.State != redrive.StatePending {
		h.Errorf("badreq not redriven")
	}
	for _, k := range []string{"timeout", "percent", "stageb"} {
		if it := h.item(m[k]); it.State != redrive.StateDead {
			h.Errorf("%s redriven though the filter did not select it", k)
		}
	}
	n, err = h.s.Redrive(h.ctx, redrive.ItemFilter{Stage: "b"}, now, 0)
	if err != nil || n != 1 {
		h.Errorf("Redrive(stage b) = %d, %v", n, err)
	}
	n, err = h.s.Redrive(h.ctx, redrive.ItemFilter{Since: at(2 * time.Minute), Until: at(4 * time.Minute)}, now, 0)
	if err != nil || n != 1 {
		h.Errorf("Redrive(since, until) = %d, %v; want 1 (percent)", n, err)
	}
	n, err = h.s.Redrive(h.ctx, redrive.ItemFilter{Limit: 1}, now, 0)
	if err != nil || n != 1 {
		h.Errorf("Redrive(limit 1) = %d, %v", n, err)
	}
	if n := h.count(redrive.ItemFilter{States: []redrive.State{redrive.StateDead}}); n != 0 {
		h.Errorf("%d dead items left", n)
	}
}

func testPurge(h *h) {
	r, m := dlqFixture(h)
	deadIDs := []int64{m["timeout"], m["badreq"], m["percent"], m["stageb"]}
	n, err := h.s.Purge(h.ctx, redrive.ItemFilter{RunID: r.ID, Class: "final"})
	if err != nil || n != 2 {
		h.Fatalf("Purge(final) = %d, %v; want 2", n, err)
	}
	for _, id := range []int64{m["badreq"], m["percent"]} {
		if _, err := h.s.GetItem(h.ctx, id); !errors.Is(err, redrive.ErrNotFound) {
			h.Errorf("purged item %d: %v", id, err)
		}
		if as := h.attempts(id); len(as) != 0 {
			h.Errorf("purged item %d kept %d attempts", id, len(as))
		}
	}
	n, err = h.s.Purge(h.ctx, redrive.ItemFilter{})
	if err != nil || n != 2 {
		h.Fatalf("Purge(all dead) = %d, %v; want 2", n, err)
	}
	for _, id := range deadIDs {
		if _, err := h.s.GetItem(h.ctx, id); err == nil {
			h.Errorf("dead item %d survived Purge", id)
		}
	}
	for _, k := range []string{"ok", "pending", "canceled"} {
		if _, err := h.s.GetItem(h.ctx, m[k]); err != nil {
			h.Errorf("Purge deleted the %s item: %v", k, err)
		}
	}
	if as := h.attempts(m["ok"]); len(as) != 1 {
		h.Errorf("Purge deleted attempts of a kept item")
	}
	n, err = h.s.Purge(h.ctx, redrive.ItemFilter{States: []redrive.State{redrive.StateCanceled}})
	if err != nil || n != 1 {
		h.Errorf("Purge(canceled) = %d, %v; want 1", n, err)
	}
	if _, err := h.s.Purge(h.ctx, redrive.ItemFilter{States: []redrive.State{redrive.StatePending}}); err == nil {
		h.Errorf("Purge of pending items succeeded")
	}
	if _, err := h.s.GetItem(h.ctx, m["pending"]); err != nil {
		h.Errorf("pending item gone: %v", err)
	}
	c := h.getRun(r.ID).Counts
	checkCounts(h, c)
	if c.Total != 7 || c.Purged != 5 {
		h.Errorf("counts after purge = %+v, want the total of 7 kept with 5 purged", c)
	}
}

func testDeleteSucceeded(h *h) {
	r := h.run("p", "")
	in := h.enqueueN(r, "a", Base, 6)
	ls := h.claimAll("p", Base)
	// Items 0..3 succeed at minutes 1..4; item 4 dies; item 5 stays running.
	var cs []redrive.Completion
	for i, l := range ls[:4] {
		cs = append(cs, succeed(l, at(time.Duration(i+1)*time.Minute)))
	}
	cs = append(cs, kill(ls[4], at(time.Minute), "final", "e"))
	h.complete(cs...)
	n, err := h.s.DeleteSucceeded(h.ctx, at(3*time.Minute), 1)
	if err != nil || n != 1 {
		h.Fatalf("DeleteSucceeded(limit 1) = %d, %v", n, err)
	}
	n, err = h.s.DeleteSucceeded(h.ctx, at(3*time.Minute), 10)
	if err != nil || n != 1 {
		h.Fatalf("DeleteSucceeded = %d, %v; want 1", n, err)
	}
	for i, id := range in {
		_, err := h.s.GetItem(h.ctx, id)
		gone := errors.Is(err, redrive.ErrNotFound)
		if gone != (i < 2) {
			h.Errorf("item %d gone = %v (%v)", i, gone, err)
		}
		if gone && len(h.attempts(id)) != 0 {
			h.Errorf("attempts of deleted item %d kept", i)
		}
	}
	if n, err := h.s.DeleteSucceeded(h.ctx, at(time.Hour), 0); err != nil || n != 2 {
		h.Errorf("DeleteSucceeded(no limit) = %d, %v; want 2", n, err)
	}
	// The run's counts are its history: the deleted items stay counted as
	// succeeded, and the run's live rows are the two others.
	c := h.getRun(r.ID).Counts
	checkCounts(h, c)
	if c != (redrive.Counts{Total: 6, Succeeded: 4, Dead: 1, Running: 1}) {
		h.Errorf("counts = %+v, want the 4 deleted items still counted as succeeded", c)
	}
	if n, err := h.s.Count(h.ctx, redrive.ItemFilter{RunID: r.ID}); err != nil || n != 2 {
		h.Errorf("items left = %d, %v; want 2", n, err)
	}
}

func testFilterValidate(h *h) {
	bad := []redrive.ItemFilter{
		{States: []redrive.State{"bogus"}},
		{Since: at(time.Hour), Until: Base},
		{Limit: -1},
	}
	for _, f := range bad {
		if f.Validate() == nil {
			h.Errorf("Validate(%+v) = nil", f)
		}
		if _, err := h.s.ListItems(h.ctx, f); err == nil {
			h.Errorf("ListItems(%+v) accepted", f)
		}
		if _, err := h.s.Count(h.ctx, f); err == nil {
			h.Errorf("Count(%+v) accepted", f)
		}
		if _, err := h.s.Redrive(h.ctx, f, Base, 0); err == nil {
			h.Errorf("Redrive(%+v) accepted", f)
		}
		if _, err := h.s.Purge(h.ctx, f); err == nil {
			h.Errorf("Purge(%+v) accepted", f)
		}
		if _, err := h.s.CancelPending(h.ctx, f, redrive.Reason{}); err == nil {
			h.Errorf("CancelPending(%+v) accepted", f)
		}
	}
	good := redrive.ItemFilter{States: []redrive.State{redrive.StateDead}, Since: Base, Until: Base, Limit: 5}
	if err := good.Validate(); err != nil {
		h.Errorf("Validate(%+v) = %v", good, err)
	}
}

func testTimeRoundTrip(h *h) {
	loc := time.FixedZone("UTC+5", 5*3600)
	now := time.Date(2026, 1, 1, 17, 0, 0, 123456000, loc) // 12:00:00.123456 UTC
	r, _, err := h.s.CreateRun(h.ctx, "p", redrive.RunOptions{}, now)
	if err != nil {
		h.Fatal(err)
	}
	h.equalTime("CreatedAt", h.getRun(r.ID).CreatedAt, now)
	id := h.enqueue(r, "a", now, redrive.NewItem{})[0]
	it := h.item(id)
	h.equalTime("EnqueuedAt", it.EnqueuedAt, now)
	h.equalTime("UpdatedAt", it.UpdatedAt, now)
	ls := h.claim(redrive.ClaimRequest{Pipelines: []string{"p"}, Limit: 1, Now: now, LeaseUntil: now.Add(time.Microsecond)})
	if len(ls) != 1 {
		h.Fatal("not claimed")
	}
	h.equalTime("LeaseExpiresAt", ls[0].Item.LeaseExpiresAt, now.Add(time.Microsecond))
	// Claim compares times exactly: an item due one microsecond later is not due.
	r2 := h.run("q", "")
	h.enqueue(r2, "a", now.Add(time.Microsecond), redrive.NewItem{})
	if ls := h.claim(redrive.ClaimRequest{Pipelines: []string{"q"}, Limit: 1, Now: now}); len(ls) != 0 {
		h.Errorf("item claimed a microsecond early")
	}
	if ls := h.claim(redrive.ClaimRequest{Pipelines: []string{"q"}, Limit: 1, Now: now.Add(time.Microsecond)}); len(ls) != 1 {
		h.Errorf("item not claimed when due")
	}
}
