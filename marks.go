package redrive

import "context"

// ActionMarks links the audit log's actions to the items they changed, so
// that an item's history says who redrove, canceled or retried it and
// when. A link is one narrow row per item and action, written in one
// statement from the action's filter before the action runs: a mark costs
// about what the action's own update of the item costs, however large the
// filter (docs/ui.md gives the measurements).
type ActionMarks interface {
	// MarkItems links action actionID to every item f selects (f.Limit
	// bounds them; 0 means every match) and returns how many it linked.
	// Linking an item to the same action again is not an error.
	MarkItems(ctx context.Context, actionID int64, f ItemFilter) (int, error)
	// UpdateAction sets the count and detail of the recorded action id,
	// once the action has run.
	UpdateAction(ctx context.Context, id int64, count int, detail string) error
	// ItemActions lists the actions linked to item itemID, oldest first.
	ItemActions(ctx context.Context, itemID int64) ([]AuditAction, error)
}
