package redrive

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Notification events: what a notification announces.
const (
	// EventItemDead announces an item that died (its reason says why).
	EventItemDead = "item.dead"
	// EventItemSucceeded announces an item that succeeded. It is opt-in:
	// most receivers only care about failures.
	EventItemSucceeded = "item.succeeded"
	// EventItemCanceled announces an item canceled by an operator.
	EventItemCanceled = "item.canceled"
	// EventRunFinished announces a run that left running.
	EventRunFinished = "run.finished"
)

// MaxNotificationOutput is the largest output, in bytes, that an
// item.succeeded notification carries: migration 0021's triggers copy an
// output of at most this size into the outbox row, in the transaction that
// finished the item, and leave a larger one out (Notification.OutputOmitted;
// the body then names the item's URL, where the API returns it). 64 KiB
// keeps a notification, base64 included, well under the 1 MiB that
// receivers commonly accept. Changing it takes a migration.
const MaxNotificationOutput = 64 << 10

// DefaultEvents are the events a webhook announces when it names none.
var DefaultEvents = []string{EventItemDead, EventRunFinished}

// ValidEvent reports whether e is one of the Event constants.
func ValidEvent(e string) bool {
	switch e {
	case EventItemDead, EventItemSucceeded, EventItemCanceled, EventRunFinished:
		return true
	}
	return false
}

// NotificationStatus is where a notification is in its delivery.
type NotificationStatus string

// Notification statuses.
const (
	// NotificationPending: not delivered yet; due at NextAt.
	NotificationPending NotificationStatus = "pending"
	// NotificationDelivered: the receiver answered 2xx.
	NotificationDelivered NotificationStatus = "delivered"
	// NotificationDead: given up (a final 4xx or the policy exhausted);
	// kept until redriven.
	NotificationDead NotificationStatus = "dead"
)

// Notification is one row of the outbox: an event written in the
// transaction of the state change it announces.
type Notification struct {
	ID int64 `json:"id"`
	// DeliveryID is unique per notification and the same on every
	// delivery of it, so that receivers can deduplicate.
	DeliveryID string `json:"delivery_id"`
	Event      string `json:"event"`
	Pipeline   string `json:"pipeline"`
	RunID      int64  `json:"run_id"`
	// Item fields: zero for run events.
	ItemID  int64   `json:"item_id,omitempty"`
	ItemKey string  `json:"item_key,omitempty"`
	Stage   string  `json:"stage,omitempty"`
	Reason  *Reason `json:"reason,omitempty"`
	// Callback is the item's callback URL when the notification goes
	// there rather than to the pipeline's webhook; empty for webhook
	// notifications.
	Callback string `json:"callback,omitempty"`
	// Output is the output of the item of an item.succeeded notification,
	// copied when the item succeeded, if at most MaxNotificationOutput
	// bytes; never nil then, even when empty. Nil for other events, for a
	// larger output (OutputOmitted) and for notifications written before
	// migration 0021. Lists leave it out; deliveries send it.
	Output []byte `json:"-"`
	// OutputSize is the size in bytes of that output, whether carried or
	// left out. Zero when there is none.
	OutputSize int `json:"output_size,omitempty"`
	// OutputOmitted reports an item.succeeded output larger than
	// MaxNotificationOutput, left out of the notification.
	OutputOmitted bool `json:"output_omitted,omitempty"`
	// Run fields: zero for item events.
	RunStatus  RunStatus `json:"run_status,omitempty"`
	RunReason  string    `json:"run_reason,omitempty"`
	OccurredAt time.Time `json:"occurred_at"`

	Status         NotificationStatus `json:"status"`
	Attempts       int                `json:"attempts"`
	RateLimitWaits int                `json:"rate_limit_waits"`
	NextAt         time.Time          `json:"next_at"`
	LastError      string             `json:"last_error,omitempty"`
	UpdatedAt      time.Time          `json:"updated_at"`
	// Token is the lease token of a claimed notification.
	Token int64 `json:"-"`
}

// Outbox is implemented by stores that keep notifications (both the SQLite
// and the PostgreSQL store). Notifications are written by the store itself,
// in the transaction of the state change, for the pipelines subscribed with
// Subscribe; these methods deliver, list and redrive them.
type Outbox interface {
	// Subscribe sets the events announced for pipeline; no events removes
	// the subscription. It applies to state changes committed after it.
	Subscribe(ctx context.Context, pipeline string, events []string, now time.Time) error
	// ClaimNotifications leases up to req.Limit due pending notifications
	// of req.Pipelines, oldest due first: their NextAt becomes
	// req.LeaseUntil and their Token a new value. On PostgreSQL rows
	// locked by another claimer are skipped.
	ClaimNotifications(ctx context.Context, req ClaimRequest) ([]Notification, error)
	// SettleNotifications records delivery results; each applies only
	// with its notification's current token, and applied[i] reports it.
	SettleNotifications(ctx context.Context, rs []DeliveryResult) (applied []bool, err error)
	// ListNotifications lists notifications selected by f in ID order.
	ListNotifications(ctx context.Context, f NotificationFilter) ([]Notification, error)
	// RedriveNotifications makes the dead notifications selected by f
	// pending again, due at now with a fresh attempt count, and returns
	// how many.
	RedriveNotifications(ctx context.Context, f NotificationFilter, now time.Time) (int, error)
	// CountNotifications counts the notifications of f's Pipeline and
	// Event by status; f's Statuses, AfterID and Limit are ignored.
	CountNotifications(ctx context.Context, f NotificationFilter) (NotificationCounts, error)
	// DeleteDelivered deletes up to limit notifications delivered before
	// before, oldest first, and returns how many.
	DeleteDelivered(ctx context.Context, before time.Time, limit int) (int, error)
}

// DeliveredCounter is implemented by an Outbox that counts its delivered
// notifications past retention. When the store implements it, a
// retention pass that runs out of time with delivered notifications left
// to delete reports how many it left (RetentionPassed.NotificationBacklog);
// both of redrive's stores implement it.
type DeliveredCounter interface {
	// CountDelivered counts the notifications delivered before before, at
	// most limit (0: no limit).
	CountDelivered(ctx context.Context, before time.Time, limit int) (int, error)
}

// NotificationCounts are notifications by status. Total is their sum.
type NotificationCounts struct {
	Pending   int `json:"pending"`
	Delivered int `json:"delivered"`
	Dead      int `json:"dead"`
	Total     int `json:"total"`
}

// Add counts n notifications of status st.
func (c *NotificationCounts) Add(st NotificationStatus, n int) {
	switch st {
	case NotificationPending:
		c.Pending += n
	case NotificationDelivered:
		c.Delivered += n
	case NotificationDead:
		c.Dead += n
	}
	c.Total += n
}

// DeliveryResult is the outcome of one delivery of a claimed notification.
type DeliveryResult struct {
	ID    int64
	Token int64
	// Status is delivered, dead, or pending (a retry due at NextAt).
	Status         NotificationStatus
	Attempts       int
	RateLimitWaits int
	NextAt         time.Time
	// Error is the last failure, kept for operators; empty on success.
	Error string
	Now   time.Time
}

// NotificationFilter selects notifications. Zero fields select everything.
type NotificationFilter struct {
	Pipeline string
	// Statuses selects by status; empty means all (RedriveNotifications:
	// dead, the only status it accepts).
	Statuses []NotificationStatus
	Event    string
	// AfterID pages forwards: only notifications with a larger ID.
	AfterID int64
	// Limit caps the result. 0 means 100 for ListNotifications and no
	// limit for RedriveNotifications.
	Limit int
}

// ErrBadNotificationFilter is wrapped by errors of a filter that cannot be
// right.
var ErrBadNotificationFilter = errors.New("redrive: bad notification filter")

// Validate reports a filter that cannot be right.
func (f NotificationFilter) Validate() error {
	for _, s := range f.Statuses {
		switch s {
		case NotificationPending, NotificationDelivered, NotificationDead:
		default:
			return fmt.Errorf("%w: unknown status %q (want pending, delivered or dead)", ErrBadNotificationFilter, s)
		}
	}
	if f.Event != "" && !ValidEvent(f.Event) {
		return fmt.Errorf("%w: unknown event %q", ErrBadNotificationFilter, f.Event)
	}
	if f.Limit < 0 {
		return fmt.Errorf("%w: limit must not be negative", ErrBadNotificationFilter)
	}
	return nil
}
