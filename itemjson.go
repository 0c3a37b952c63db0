package redrive

import (
	"encoding/json"

	"github.com/redrive/redrive/internal/jsonappend"
)

// appendItemJSON appends the JSON of it that Item.MarshalJSON returns:
// the bytes json.Marshal writes for itemBytesJSON, field by field without
// reflection, which took most of the time of a page of items
// (TestItemJSONMatchesMarshal holds the two together, each field set).
func appendItemJSON(b []byte, it Item) ([]byte, error) {
	var err error
	b = append(b, `{"id":`...)
	b = jsonappend.Int(b, it.ID)
	b = append(b, `,"run_id":`...)
	b = jsonappend.Int(b, it.RunID)
	b = append(b, `,"pipeline":`...)
	b = jsonappend.String(b, it.Pipeline)
	if it.Key != "" {
		b = append(b, `,"key":`...)
		b = jsonappend.String(b, it.Key)
	}
	b = append(b, `,"stage":`...)
	b = jsonappend.String(b, it.Stage)
	b = append(b, `,"stage_index":`...)
	b = jsonappend.Int(b, int64(it.StageIndex))
	b = append(b, `,"state":`...)
	b = jsonappend.String(b, string(it.State))
	if it.Priority != 0 {
		b = append(b, `,"priority":`...)
		b = jsonappend.Int(b, int64(it.Priority))
	}
	b = append(b, `,"attempt":`...)
	b = jsonappend.Int(b, int64(it.Attempt))
	if it.RateLimitWaits != 0 {
		b = append(b, `,"rate_limit_waits":`...)
		b = jsonappend.Int(b, int64(it.RateLimitWaits))
	}
	if it.FailedAttempts != 0 {
		b = append(b, `,"failed_attempts":`...)
		b = jsonappend.Int(b, int64(it.FailedAttempts))
	}
	b = append(b, `,"enqueued_at":`...)
	if b, err = jsonappend.Time(b, it.EnqueuedAt); err != nil {
		return nil, err
	}
	b = append(b, `,"order_at":`...)
	if b, err = jsonappend.Time(b, it.OrderAt); err != nil {
		return nil, err
	}
	b = append(b, `,"next_at":`...)
	if b, err = jsonappend.Time(b, it.NextAt); err != nil {
		return nil, err
	}
	if it.LeaseOwner != "" {
		b = append(b, `,"lease_owner":`...)
		b = jsonappend.String(b, it.LeaseOwner)
	}
	if !it.LeaseExpiresAt.IsZero() {
		b = append(b, `,"lease_expires_at":`...)
		if b, err = jsonappend.Time(b, it.LeaseExpiresAt); err != nil {
			return nil, err
		}
	}
	if !it.AttemptStartedAt.IsZero() {
		b = append(b, `,"attempt_started_at":`...)
		if b, err = jsonappend.Time(b, it.AttemptStartedAt); err != nil {
			return nil, err
		}
	}
	if it.LeaseLosses != 0 {
		b = append(b, `,"lease_losses":`...)
		b = jsonappend.Int(b, int64(it.LeaseLosses))
	}
	b = append(b, `,"updated_at":`...)
	if b, err = jsonappend.Time(b, it.UpdatedAt); err != nil {
		return nil, err
	}
	if it.TraceParent != "" {
		b = append(b, `,"traceparent":`...)
		b = jsonappend.String(b, it.TraceParent)
	}
	if it.TraceState != "" {
		b = append(b, `,"tracestate":`...)
		b = jsonappend.String(b, it.TraceState)
	}
	if it.Reason != nil {
		r, err := json.Marshal(it.Reason)
		if err != nil {
			return nil, err
		}
		b = append(b, `,"reason":`...)
		b = append(b, r...)
	}
	if it.Payload != nil {
		v, enc := EncodeBytes(it.Payload)
		b = append(b, `,"payload":`...)
		b = jsonappend.Raw(b, v)
		b = append(b, `,"payload_encoding":`...)
		b = jsonappend.String(b, enc)
	}
	if it.Input != nil {
		v, enc := EncodeBytes(it.Input)
		b = append(b, `,"input":`...)
		b = jsonappend.Raw(b, v)
		b = append(b, `,"input_encoding":`...)
		b = jsonappend.String(b, enc)
	}
	return append(b, '}'), nil
}

// AppendJSON appends the item's JSON, as MarshalJSON returns it, to b.
func (it Item) AppendJSON(b []byte) ([]byte, error) { return appendItemJSON(b, it) }
