// Package keptcounts says which reads the stores answer from the counts of
// failures they keep as failures are written (their failure_counts tables:
// per run, pipeline, stage, class, fingerprint and kind, where the kind is
// an item's state, dead or canceled, or a failed attempt).
package keptcounts

import "github.com/redrive/redrive"

// Groups reports whether the kept counts hold the error groups of f: it
// filters by no more than run, pipeline, stage, class and fingerprint (no
// key, error text, time, IDs or action) and selects dead or canceled items
// only (or no state).
func Groups(f redrive.ItemFilter) bool {
	if f.ErrorContains != "" || f.Key != "" || !f.Since.IsZero() || !f.Until.IsZero() || !f.DueAfter.IsZero() || len(f.IDs) > 0 || f.ActionID != 0 {
		return false
	}
	for _, st := range f.States {
		if st != redrive.StateDead && st != redrive.StateCanceled {
			return false
		}
	}
	return true
}

// Count reports whether the kept counts hold the number of items f
// selects: the items of the states it names, all dead or canceled, with
// the filters of Groups and no cursor.
func Count(f redrive.ItemFilter) bool {
	return len(f.States) > 0 && f.AfterID == 0 && Groups(f)
}
