package retry

import "context"

// Pacer is the flow control of an outer layer that paces calls before their attempts
// start (redrive's durable engine: a stage's pace, gate and outage pause run before the
// handler is called and before its timeout starts). A client that would pace the same
// calls itself (retryhttp.Transport) leaves that to the Pacer found in the request's
// context (OuterPacer): two flow controls in a row wait twice, and the inner one waits
// inside the attempt, where its wait uses up the attempt's timeout before the call is
// even sent.
type Pacer interface {
	// NetworkDependency tells the pacer that the calls made under its context go over
	// the network to a dependency that may be overloaded. A pacer whose limit is unknown
	// then paces its slow start by time, from DefaultInitialRate, as a Limiter at its
	// defaults does, rather than by the calls in flight alone (which suits a stage that
	// calls nothing that can be overloaded). retryhttp.Transport calls it for every
	// request; it must be cheap and safe for concurrent use.
	NetworkDependency()
}

type pacerKey struct{}

// pacerValue is stored under pacerKey; p is nil for an outer layer that turned its flow
// control off.
type pacerValue struct{ p Pacer }

// Paced returns a context telling the clients below that an outer layer owns the flow
// control of the calls made with it: p paces them before their attempts start. A nil p
// says that the outer layer's flow control is off on purpose, so that nothing paces
// those calls. redrive's engine passes such a context to every stage handler.
func Paced(ctx context.Context, p Pacer) context.Context {
	return context.WithValue(ctx, pacerKey{}, pacerValue{p})
}

// OuterPacer returns the Pacer of the outer layer that owns the flow control of calls
// made with ctx (nil when that layer's flow control is off), and whether there is such a
// layer at all. A client with a flow control of its own sends without it when ok is true.
func OuterPacer(ctx context.Context) (p Pacer, ok bool) {
	v, ok := ctx.Value(pacerKey{}).(pacerValue)
	return v.p, ok
}
