package redrive

import "time"

// MaxTimelineBuckets is the most buckets one Timeline request may span, so
// that a chart's query and its answer stay small whatever the store holds.
const MaxTimelineBuckets = 1440

// TimelineFilter selects the attempts Timeline counts and how it buckets
// them: bucket i holds the attempts that finished in
// [Since + i*Step, Since + (i+1)*Step), up to Until.
type TimelineFilter struct {
	// RunID limits the count to one run. Default 0: every run.
	RunID int64
	// Pipeline limits the count to one pipeline. Default "": every
	// pipeline.
	Pipeline string
	// Since is the start of the first bucket (inclusive). Required.
	Since time.Time
	// Until is the end of the last bucket (exclusive). Required.
	Until time.Time
	// Step is the width of a bucket. Required; (Until-Since)/Step is at
	// most MaxTimelineBuckets.
	Step time.Duration
}

// Buckets returns how many buckets f spans: the last one may be cut short
// by Until.
func (f TimelineFilter) Buckets() int {
	if f.Step <= 0 || !f.Until.After(f.Since) {
		return 0
	}
	d := f.Until.Sub(f.Since)
	n := d / f.Step
	if d%f.Step != 0 {
		n++
	}
	return int(n)
}

// Validate reports a filter that cannot be answered; the error is a
// *FilterError (it wraps ErrBadFilter).
func (f TimelineFilter) Validate() error {
	switch {
	case f.Since.IsZero() || f.Until.IsZero():
		return badFilter("since", "a timeline needs since and until")
	case !f.Until.After(f.Since):
		return badFilter("until", "until must be after since")
	case f.Step < time.Millisecond:
		return badFilter("step", "step must be at least 1ms")
	case f.Until.Sub(f.Since)/f.Step > MaxTimelineBuckets || f.Buckets() > MaxTimelineBuckets:
		return badFilter("step", "too many buckets: (until - since) / step must be at most %d", MaxTimelineBuckets)
	case f.RunID < 0:
		return badFilter("run", "run must not be negative")
	}
	return nil
}

// TimelineBucket counts the attempts of one stage that finished in one
// bucket of a TimelineFilter, by outcome. Buckets without attempts are not
// returned.
type TimelineBucket struct {
	Pipeline string `json:"pipeline"`
	Stage    string `json:"stage"`
	// Bucket is the bucket's index, from 0; Start is Since + Bucket*Step.
	Bucket int       `json:"bucket"`
	Start  time.Time `json:"start"`
	// Attempts counts every attempt; the others count it by outcome.
	Attempts    int `json:"attempts"`
	Succeeded   int `json:"succeeded"`
	Retried     int `json:"retried"`
	RateLimited int `json:"rate_limited"`
	Dead        int `json:"dead"`
	Lost        int `json:"lost"`
}

// LeaseLoad is what one owner (a worker process, Worker.Owner) holds
// leased at one stage: the items it is working right now.
type LeaseLoad struct {
	Owner    string `json:"owner"`
	Pipeline string `json:"pipeline"`
	Stage    string `json:"stage"`
	// Count is how many running items the owner holds at the stage.
	Count int `json:"count"`
	// ItemIDs are the smallest IDs among them, at most the sample asked
	// for.
	ItemIDs []int64 `json:"item_ids"`
	// Expired counts those whose lease expired before the time asked
	// about: a rescuer will take them over.
	Expired int `json:"expired"`
}
