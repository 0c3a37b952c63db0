package web

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/redrive/redrive"
)

// Defaults of the console's views.
const (
	// DefaultTimelineWindow is how far back GET /api/v1/timeline looks
	// without since or run.
	DefaultTimelineWindow = time.Hour
	// DefaultTimelineBuckets is about how many buckets GET
	// /api/v1/timeline picks a step for when none is given.
	DefaultTimelineBuckets = 60
	// LeaseSample is how many item IDs GET /api/v1/workers lists per
	// worker and stage.
	LeaseSample = 5
	// MaxPauseReasonBytes bounds the reason of a stage pause.
	MaxPauseReasonBytes = 500
)

// viewRoutes lists the endpoints of the console's charts, workers and
// stages views.
func (s *server) viewRoutes() []route {
	return []route{
		{"GET /api/v1/timeline", ScopeRead, s.timeline},
		{"GET /api/v1/workers", ScopeRead, s.workers},
		{"GET /api/v1/stages", ScopeRead, s.stages},
		{"POST /api/v1/stages/pause", ScopeAdmin, s.pauseStage},
		{"POST /api/v1/stages/resume", ScopeAdmin, s.resumeStage},
	}
}

// timelineResponse is the response of GET /api/v1/timeline.
type timelineResponse struct {
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	// Step is the width of a bucket in seconds.
	Step float64 `json:"step"`
	// Buckets is how many buckets the range holds; Data lists only those
	// with attempts.
	Buckets int                      `json:"buckets"`
	Data    []redrive.TimelineBucket `json:"data"`
}

// niceSteps are the bucket widths a chart picks from: whole seconds,
// minutes, hours and days.
var niceSteps = []time.Duration{
	time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour, 7 * 24 * time.Hour,
}

// niceStep returns the smallest nice step that spans d in at most n
// buckets.
func niceStep(d time.Duration, n int) time.Duration {
	for _, st := range niceSteps {
		if d <= st*time.Duration(n) {
			return st
		}
	}
	// Longer than 60 weeks: whole days, as many as keep within the most
	// buckets a timeline may have.
	const day = 24 * time.Hour
	return day * (d/time.Duration(redrive.MaxTimelineBuckets)/day + 1)
}

// GET /api/v1/timeline?run=&pipeline=&since=&until=&step=: attempts per
// stage and time bucket by outcome. Without since, a run's chart starts
// when it was created and others an hour ago; until defaults to now (a
// finished run's finish); step (a Go duration such as 1m) defaults to a
// round width that makes about 60 buckets, since then starting on a
// multiple of it.
func (s *server) timeline(w http.ResponseWriter, r *http.Request) {
	q := newQuery(r, "run", "pipeline", "since", "until", "step")
	f := redrive.TimelineFilter{RunID: q.id("run"), Pipeline: q.str("pipeline"), Since: q.time("since"), Until: q.time("until")}
	if v := q.str("step"); v != "" {
		st, err := time.ParseDuration(v)
		if err != nil || st <= 0 {
			q.fail(badField("step", "must be a duration such as 10s, 1m or 1h, got %q", v))
		}
		f.Step = st
	}
	if q.err != nil {
		writeBad(w, q.err)
		return
	}
	ctx := r.Context()
	now := s.opts.Now().UTC()
	if err := redrive.CheckFilter(ctx, s.store, redrive.ItemFilter{RunID: f.RunID, Pipeline: f.Pipeline}); err != nil {
		s.filterFail(w, r, "timeline", redrive.ItemFilter{RunID: f.RunID}, err)
		return
	}
	if f.RunID != 0 {
		run, err := s.store.GetRun(ctx, f.RunID)
		if err != nil {
			s.fail(w, r, "timeline", err)
			return
		}
		if f.Since.IsZero() {
			f.Since = run.CreatedAt
		}
		if f.Until.IsZero() && !run.FinishedAt.IsZero() {
			f.Until = run.FinishedAt.Add(time.Second)
		}
	}
	if f.Until.IsZero() {
		f.Until = now
	}
	if f.Since.IsZero() {
		f.Since = f.Until.Add(-DefaultTimelineWindow)
	}
	if f.Step == 0 && f.Until.After(f.Since) {
		f.Step = niceStep(f.Until.Sub(f.Since), DefaultTimelineBuckets)
		// Round buckets read better: 12:05, 12:06... not 12:05:37.
		f.Since = f.Since.Truncate(f.Step)
	}
	f.Since, f.Until = f.Since.UTC(), f.Until.UTC()
	if err := f.Validate(); err != nil {
		s.fail(w, r, "timeline", err)
		return
	}
	data, err := s.store.Timeline(ctx, f)
	if err != nil {
		s.fail(w, r, "timeline", err)
		return
	}
	nonNil(&data)
	writeJSON(w, http.StatusOK, timelineResponse{Since: f.Since, Until: f.Until, Step: f.Step.Seconds(), Buckets: f.Buckets(), Data: data})
}

// workerView is one worker of GET /api/v1/workers with what it holds.
type workerView struct {
	redrive.Worker
	// Live reports whether it heartbeat recently enough to be taken as
	// running.
	Live bool `json:"live"`
	// Leased counts the items it holds; Work breaks them down by stage.
	Leased int                 `json:"leased"`
	Work   []redrive.LeaseLoad `json:"work"`
}

// workersResponse is the response of GET /api/v1/workers.
type workersResponse struct {
	// Data lists the recorded workers, live ones first, then by owner.
	Data []workerView `json:"data"`
	// Orphaned are the leases of owners with no worker row: processes
	// that vanished (their leases expire and are rescued) or clients that
	// claim without recording themselves.
	Orphaned []redrive.LeaseLoad `json:"orphaned"`
}

// GET /api/v1/workers: the worker processes and the items each works now.
func (s *server) workers(w http.ResponseWriter, r *http.Request) {
	if q := newQuery(r); q.err != nil {
		writeBad(w, q.err)
		return
	}
	ctx := r.Context()
	now := s.opts.Now()
	ws, err := s.store.ListWorkers(ctx)
	if err != nil {
		s.fail(w, r, "workers", err)
		return
	}
	loads, err := s.store.LeaseLoads(ctx, now, LeaseSample)
	if err != nil {
		s.fail(w, r, "workers", err)
		return
	}
	resp := workersResponse{Data: make([]workerView, 0, len(ws)), Orphaned: []redrive.LeaseLoad{}}
	byOwner := map[string]int{}
	for _, wk := range ws {
		byOwner[wk.Owner] = len(resp.Data)
		resp.Data = append(resp.Data, workerView{Worker: wk, Live: wk.Live(now), Work: []redrive.LeaseLoad{}})
	}
	for _, l := range loads {
		i, ok := byOwner[l.Owner]
		if !ok {
			resp.Orphaned = append(resp.Orphaned, l)
			continue
		}
		resp.Data[i].Work = append(resp.Data[i].Work, l)
		resp.Data[i].Leased += l.Count
	}
	slices.SortStableFunc(resp.Data, func(a, b workerView) int {
		if a.Live != b.Live {
			if a.Live {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Owner, b.Owner)
	})
	writeJSON(w, http.StatusOK, resp)
}

// stageView is one stage of GET /api/v1/stages.
type stageView struct {
	Pipeline string `json:"pipeline"`
	Stage    string `json:"stage"`
	// Counts are its items by state.
	Counts map[redrive.State]int `json:"counts"`
	// Paused is its pause; absent when it runs.
	Paused *redrive.StagePause `json:"paused,omitempty"`
	// Workers counts the live workers of its pipeline.
	Workers int `json:"workers"`
}

// GET /api/v1/stages?pipeline=: every stage that holds items, made
// attempts in the last hour or is paused (and the first stage of each
// pipeline the server accepts items for),
// in pipeline order, with its item counts, its pause and the live workers
// of its pipeline.
func (s *server) stages(w http.ResponseWriter, r *http.Request) {
	q := newQuery(r, "pipeline")
	pipeline := q.str("pipeline")
	if q.err != nil {
		writeBad(w, q.err)
		return
	}
	ctx := r.Context()
	// A pipeline the server accepts items for is known before its first
	// run; any other must have runs.
	if pipeline != "" && !slices.ContainsFunc(s.opts.Pipelines, func(p PipelineRef) bool { return p.Name == pipeline }) {
		if err := redrive.CheckFilter(ctx, s.store, redrive.ItemFilter{Pipeline: pipeline}); err != nil {
			s.fail(w, r, "stages", err)
			return
		}
	}
	counts, err := s.store.StateCounts(ctx, 0)
	if err != nil {
		s.fail(w, r, "stages", err)
		return
	}
	paused, err := s.store.PausedStages(ctx)
	if err != nil {
		s.fail(w, r, "stages", err)
		return
	}
	now := s.opts.Now().UTC()
	live, err := redrive.LiveWorkers(ctx, s.store, "", now)
	if err != nil {
		s.fail(w, r, "stages", err)
		return
	}
	out := []stageView{}
	index := map[redrive.StageKey]int{}
	add := func(p, st string) *stageView {
		k := redrive.StageKey{Pipeline: p, Stage: st}
		if i, ok := index[k]; ok {
			return &out[i]
		}
		n := 0
		for _, wk := range live {
			if wk.Serves(p) {
				n++
			}
		}
		index[k] = len(out)
		out = append(out, stageView{Pipeline: p, Stage: st, Workers: n, Counts: map[redrive.State]int{
			redrive.StatePending: 0, redrive.StateRunning: 0, redrive.StateSucceeded: 0, redrive.StateDead: 0, redrive.StateCanceled: 0}})
		return &out[len(out)-1]
	}
	want := func(p string) bool { return pipeline == "" || p == pipeline }
	for _, ref := range s.opts.Pipelines {
		if want(ref.Name) {
			add(ref.Name, ref.FirstStage)
		}
	}
	for _, c := range counts {
		if want(c.Pipeline) {
			add(c.Pipeline, c.Stage).Counts[c.State] += c.Count
		}
	}
	// Stages that items passed through lately hold none now but are
	// still worth seeing (and pausing).
	recent, err := s.store.Timeline(ctx, redrive.TimelineFilter{Pipeline: pipeline, Since: now.Add(-DefaultTimelineWindow), Until: now, Step: DefaultTimelineWindow})
	if err != nil {
		s.fail(w, r, "stages", err)
		return
	}
	for _, b := range recent {
		add(b.Pipeline, b.Stage)
	}
	for _, p := range paused {
		if want(p.Pipeline) {
			add(p.Pipeline, p.Stage).Paused = &p
		}
	}
	// Stages keep the store's pipeline order; a stage known only from its
	// pause or the server's options goes after the counted ones of its
	// pipeline.
	slices.SortStableFunc(out, func(a, b stageView) int { return strings.Compare(a.Pipeline, b.Pipeline) })
	writeJSON(w, http.StatusOK, listResponse[stageView]{Data: out})
}

// stageRequest is the body of POST /api/v1/stages/pause and resume.
type stageRequest struct {
	Pipeline string `json:"pipeline"`
	Stage    string `json:"stage"`
	// Reason says why (pause only), for the other operators and the audit
	// log.
	Reason string `json:"reason"`
}

// stageActionResponse is the response of POST /api/v1/stages/pause and
// resume.
type stageActionResponse struct {
	// Changed is false when the stage already was in the state asked for.
	Changed bool `json:"changed"`
	// Paused is the stage's pause after the request; absent when it runs.
	Paused  *redrive.StagePause `json:"paused,omitempty"`
	Warning string              `json:"warning,omitempty"`
}

func (s *server) stageRequest(w http.ResponseWriter, r *http.Request) (stageRequest, bool) {
	var req stageRequest
	err := s.decodeBody(w, r, &req)
	switch {
	case err != nil:
	case strings.TrimSpace(req.Pipeline) == "":
		err = badField("pipeline", "required: name the stage's pipeline")
	case strings.TrimSpace(req.Stage) == "":
		err = badField("stage", "required: name the stage")
	case len(req.Reason) > MaxPauseReasonBytes:
		err = badField("reason", "at most %d bytes", MaxPauseReasonBytes)
	}
	if err != nil {
		writeBad(w, err)
		return req, false
	}
	return req, true
}

// pauseOf returns the pause of a stage, or nil.
func (s *server) pauseOf(r *http.Request, p, st string) (*redrive.StagePause, error) {
	ps, err := s.store.PausedStages(r.Context())
	if err != nil {
		return nil, err
	}
	for _, x := range ps {
		if x.Pipeline == p && x.Stage == st {
			return &x, nil
		}
	}
	return nil, nil
}

// POST /api/v1/stages/pause {"pipeline", "stage", "reason"}: no worker
// process claims the stage's items until it is resumed (within about a
// second, see redrive's engine). Pausing a paused stage keeps its first
// pause. Recorded in the audit log.
func (s *server) pauseStage(w http.ResponseWriter, r *http.Request) {
	req, ok := s.stageRequest(w, r)
	if !ok {
		return
	}
	// A stage no item has reached yet may be worked later: only a pipeline
	// nothing knows is refused.
	f := redrive.ItemFilter{Pipeline: req.Pipeline, Stage: req.Stage}
	if err := redrive.CheckFilter(r.Context(), s.store, redrive.ItemFilter{Pipeline: req.Pipeline}); err != nil {
		s.fail(w, r, "pause stage", err)
		return
	}
	reason := strings.TrimSpace(req.Reason)
	changed, err := s.store.PauseStage(r.Context(), redrive.StagePause{Pipeline: req.Pipeline, Stage: req.Stage, By: s.actor(r), At: s.opts.Now().UTC(), Reason: reason})
	if err != nil {
		s.fail(w, r, "pause stage", err)
		return
	}
	resp := stageActionResponse{Changed: changed}
	if changed {
		s.opts.Logger.Info("web: pause stage", "pipeline", req.Pipeline, "stage", req.Stage)
		resp.Warning = s.audit(r, "pause", f, 0, reason)
	}
	if resp.Paused, err = s.pauseOf(r, req.Pipeline, req.Stage); err != nil {
		s.fail(w, r, "pause stage", err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// POST /api/v1/stages/resume {"pipeline", "stage"}: workers claim the
// stage's items again. Recorded in the audit log.
func (s *server) resumeStage(w http.ResponseWriter, r *http.Request) {
	req, ok := s.stageRequest(w, r)
	if !ok {
		return
	}
	if req.Reason != "" {
		writeBad(w, badField("reason", "is for pause only"))
		return
	}
	changed, err := s.store.ResumeStage(r.Context(), req.Pipeline, req.Stage)
	if err != nil {
		s.fail(w, r, "resume stage", err)
		return
	}
	resp := stageActionResponse{Changed: changed}
	if changed {
		s.opts.Logger.Info("web: resume stage", "pipeline", req.Pipeline, "stage", req.Stage)
		resp.Warning = s.audit(r, "resume", redrive.ItemFilter{Pipeline: req.Pipeline, Stage: req.Stage}, 0, "")
	}
	writeJSON(w, http.StatusOK, resp)
}
