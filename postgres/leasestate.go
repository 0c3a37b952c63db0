package postgres

import (
	"slices"
	"strings"

	"github.com/redrive/redrive"
)

// A leased item keeps state 'pending' in the table: its lease
// (lease_expires_at set) alone marks it running, so that a claim changes no
// indexed column and its new row version is heap-only (migration 0029).
// Every reader of the store sees such an item as running, through the
// expressions below; no row holds state 'running'.

// stateExpr is an item's state as the store reports it.
const stateExpr = `(CASE WHEN state = 'pending' AND lease_expires_at IS NOT NULL THEN 'running' ELSE state END)`

// updatedExpr is when an item was last updated, as the store reports it:
// for a running item, when its lease began, since a claim leaves
// updated_at alone. The claim records that time once, in its batch
// (claimed_at, migration 0030), not in each item's row, which would then
// need more room for the heap-only version; the lease's token names the
// batch. The later of the two, because a claim of a process older than
// the column leaves claimed_at NULL, and no lease begins before its item
// became pending.
func (s *Store) updatedExpr() string {
	return `(CASE WHEN state = 'pending' AND lease_expires_at IS NOT NULL THEN greatest(updated_at,
		(SELECT lb.claimed_at FROM ` + s.q + `.lease_batches lb WHERE lb.id = lease_token >> 1)) ELSE updated_at END)`
}

// stateCond is the condition that an item is in state st.
func (s *Store) stateCond(a *args, st redrive.State) string {
	return s.statesCond(a, []redrive.State{st})
}

// inBatches is the condition that an item is one of the batches that may
// hold leases (leasebatches.go): every running item is, and they are the
// items in flight, so a query for running items looks them up by ID
// rather than walk the pending ones.
func (s *Store) inBatches() string {
	return `id = ANY(ARRAY(SELECT unnest(ids) FROM ` + s.q + `.lease_batches WHERE held IS NULL OR held > 0))`
}

// statesCond is the condition that an item is in one of sts. The final
// states go as one list of constants, which the partial indexes on them
// (items_dlq, items_cause) are proven to cover; a state the store does not
// know goes as a parameter of a, and matches no item.
func (s *Store) statesCond(a *args, sts []redrive.State) string {
	var conds, final []string
	for _, st := range slices.Compact(slices.Sorted(slices.Values(sts))) {
		switch st {
		case redrive.StatePending:
			conds = append(conds, `(state = 'pending' AND lease_expires_at IS NULL)`)
		case redrive.StateRunning:
			// Only a running item holds a lease; no condition on the state,
			// so that no plan walks the pending items of items_run_state.
			conds = append(conds, `(lease_expires_at IS NOT NULL AND `+s.inBatches()+`)`)
		case redrive.StateSucceeded, redrive.StateDead, redrive.StateCanceled:
			final = append(final, `'`+string(st)+`'`)
		default:
			conds = append(conds, `state = `+a.add(string(st)))
		}
	}
	if len(final) == 1 {
		conds = append(conds, `state = `+final[0])
	} else if len(final) > 1 {
		conds = append(conds, `state IN (`+strings.Join(final, `, `)+`)`)
	}
	switch len(conds) {
	case 0:
		return `false`
	case 1:
		return conds[0]
	}
	return `(` + strings.Join(conds, ` OR `) + `)`
}

// storedState is the value of the state column of an item in state st
// other than running, and the condition on its lease that tells a pending
// item from a running one, if st is pending.
func storedState(st redrive.State) (redrive.State, string) {
	if st == redrive.StatePending {
		return st, ` AND lease_expires_at IS NULL`
	}
	return st, ``
}
