package redrive

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"
)

// RedriveOptions configure a redrive.
type RedriveOptions struct {
	// DryRun counts the items that would be redriven and changes nothing.
	DryRun bool
	// Rate spreads the redriven items at this many per second, so a fixed
	// dependency is not hit by the whole backlog at once. Default 0: all
	// due at once.
	Rate float64
	// Now is the time the first item is due. Default time.Now().
	Now time.Time
	// FromStage, when set, restarts the items at this earlier stage of
	// their pipeline, with the input that stage had (the previous stage's
	// stored output, or the item's original input for the first stage),
	// rather than at the stage that stopped them: bad output of an earlier
	// stage is then made again. Every selected item must have reached the
	// stage, else nothing is redriven and the error wraps ErrBadFilter.
	// Default "": the stage that stopped each item.
	FromStage string
}

// ErrBadFilter is wrapped by the errors of functions given a filter that
// cannot be right.
var ErrBadFilter = errors.New("redrive: bad filter")

func dlqFilter(f ItemFilter, allowed ...State) (ItemFilter, error) {
	if err := f.Validate(); err != nil {
		return f, fmt.Errorf("%w: %w", ErrBadFilter, err)
	}
	if len(f.States) == 0 {
		f.States = []State{StateDead}
	}
	for _, s := range f.States {
		if !slices.Contains(allowed, s) {
			return f, fmt.Errorf("%w: state %s cannot be selected here (only %v)", ErrBadFilter, s, allowed)
		}
	}
	return f, nil
}

// Redrive sends the dead (or, when the filter says so, canceled) items
// selected by f through again from the stage that stopped them, with a
// fresh attempt counter; their history is kept and their runs reopen. It
// returns how many items it redrove, or with DryRun would redrive.
func Redrive(ctx context.Context, s Store, f ItemFilter, o RedriveOptions) (int, error) {
	f, err := dlqFilter(f, StateDead, StateCanceled)
	if err != nil {
		return 0, err
	}
	if o.Rate < 0 {
		return 0, fmt.Errorf("%w: rate must not be negative", ErrBadFilter)
	}
	if o.DryRun && o.FromStage == "" {
		n, err := s.Count(ctx, f)
		if err != nil {
			return 0, fmt.Errorf("redrive: count items to redrive: %w", err)
		}
		return n, nil
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	var interval time.Duration
	if o.Rate > 0 {
		interval = time.Duration(float64(time.Second) / o.Rate)
	}
	var n int
	if o.FromStage != "" {
		n, err = s.RedriveFrom(ctx, RedriveFromRequest{Filter: f, Stage: o.FromStage, Now: o.Now, Interval: interval, DryRun: o.DryRun})
	} else {
		n, err = s.Redrive(ctx, f, o.Now, interval)
	}
	if err != nil {
		return 0, fmt.Errorf("redrive: redrive: %w", err)
	}
	return n, nil
}

// Purge deletes the dead items selected by f (canceled ones too when f
// names that state) with their attempts. With dryRun it only counts them.
func Purge(ctx context.Context, s Store, f ItemFilter, dryRun bool) (int, error) {
	f, err := dlqFilter(f, StateDead, StateCanceled)
	if err != nil {
		return 0, err
	}
	var n int
	if dryRun {
		n, err = s.Count(ctx, f)
	} else {
		n, err = s.Purge(ctx, f)
	}
	if err != nil {
		return 0, fmt.Errorf("redrive: purge: %w", err)
	}
	return n, nil
}

// ExportRecord is one line of an export: a dead or canceled item with its
// reason and attempt history.
type ExportRecord struct {
	Item     Item      `json:"item"`
	Attempts []Attempt `json:"attempts"`
}

// exportPage is how many items an export reads at a time.
const exportPage = 500

// Export writes the dead items selected by f (canceled ones too when f
// names that state) to w as JSON lines of ExportRecord, in ID order, and
// returns how many it wrote. f.Limit bounds the total.
func Export(ctx context.Context, s Store, f ItemFilter, w io.Writer) (int, error) {
	f, err := dlqFilter(f, StateDead, StateCanceled)
	if err != nil {
		return 0, err
	}
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	total, limit := 0, f.Limit
	for {
		page := f
		page.Limit = exportPage
		if limit > 0 {
			page.Limit = min(exportPage, limit-total)
		}
		items, err := s.ListItems(ctx, page)
		if err != nil {
			return total, fmt.Errorf("redrive: export: %w", err)
		}
		for _, it := range items {
			atts, err := s.Attempts(ctx, it.ID)
			if err != nil {
				return total, fmt.Errorf("redrive: export item %d: %w", it.ID, err)
			}
			if err := enc.Encode(ExportRecord{Item: it, Attempts: atts}); err != nil {
				return total, fmt.Errorf("redrive: export: %w", err)
			}
			total++
			f.AfterID = it.ID
		}
		if len(items) < page.Limit || (limit > 0 && total >= limit) {
			break
		}
	}
	if err := bw.Flush(); err != nil {
		return total, fmt.Errorf("redrive: export: %w", err)
	}
	return total, nil
}

// Redrive is the package-level Redrive on the client's store; it also
// wakes the client's workers and emits a Redriven event.
func (c *Client) Redrive(ctx context.Context, f ItemFilter, o RedriveOptions) (int, error) {
	if o.Now.IsZero() {
		o.Now = c.cfg.Now()
	}
	n, err := Redrive(ctx, c.store, f, o)
	if err != nil || o.DryRun {
		return n, err
	}
	c.emit(Redriven{Filter: f, Count: n})
	c.wake()
	return n, nil
}

// ErrRunNotRunning is returned (wrapped) by CancelRun for a run that has
// already finished or was aborted.
var ErrRunNotRunning = errors.New("redrive: run is not running")

// CancelRun cancels the pending items of a run with reason and marks the
// run aborted. Running items finish their attempt; what they would move on
// to is canceled too.
func (c *Client) CancelRun(ctx context.Context, runID int64, reason string) (int, error) {
	if reason == "" {
		reason = "canceled by an operator"
	}
	now := c.cfg.Now()
	if ok, err := c.store.FinishRun(ctx, runID, RunAborted, reason, now); err != nil {
		return 0, fmt.Errorf("redrive: cancel run %d: %w", runID, err)
	} else if !ok {
		return 0, fmt.Errorf("redrive: cancel run %d: %w", runID, ErrRunNotRunning)
	}
	c.mu.Lock()
	if c.eng != nil {
		c.eng.mu.Lock()
		c.eng.setAbortedLocked(runID, reason, true)
		c.eng.mu.Unlock()
	}
	c.mu.Unlock()
	n, err := c.store.CancelPending(ctx, ItemFilter{RunID: runID, States: []State{StatePending}},
		Reason{Class: ClassCanceled, Error: reason, At: now})
	if err != nil {
		return n, fmt.Errorf("redrive: cancel run %d: %w", runID, err)
	}
	return n, nil
}
