// Package retry retries operations that fail for transient reasons, calmly: with
// backoff and jitter, error classification, Retry-After handling, retry budgets,
// circuit breakers and nested layers that do not multiply calls. It uses only the
// standard library.
//
// # Policies
//
// A Policy is a small value; its zero value is usable (3 attempts, exponential backoff
// from 1s doubling up to 60s, ±20% jitter). Backoff is constant, linear or exponential
// (BaseDelay × Multiplier^(attempt-1)), capped at MaxDelay; JitterMode is proportional
// (±Jitter), none, full ([0, d]), equal ([d/2, d]) or decorrelated. Policy.Nominal,
// Policy.Bounds and Policy.Delay describe the schedule; Delay is allocation-free.
//
// # Classification
//
// Every failure is classified into an Outcome: ClassRetryable (retry after backoff),
// ClassFinal (give up at once) or ClassRateLimited (wait at least RetryAfter). Wrap
// errors with Final, Retryable or RateLimited, or implement ClassedError; such explicit
// classifications always win. Other errors go to Policy.Classifier (DefaultClassifier if
// nil: explicit wrappers, context deadlines and network errors; unknown errors are
// retryable). Build classifiers with Chain, Is, As and Func.
//
// # Do
//
// Do calls an operation until it succeeds, fails finally, or the policy gives up; it then
// returns an *Error that wraps the last error (errors.Is/As see through it), names the
// layer, says how many attempts were made and why it stopped, and carries the
// classification an outer layer should apply. Policy.Classify is the classification Do
// uses, for layers (such as redrive's durable engine) that retry on a policy's behalf.
//
//   - Context: when the caller's ctx is done Do stops at once. An attempt failing with
//     context.DeadlineExceeded from its own timeout while ctx is alive is retryable. Do
//     gives up early, returning the last real error rather than a context error, when
//     the next delay would pass ctx's deadline, or Policy.MaxElapsed.
//   - Rate limits: a ClassRateLimited failure waits Policy.RateLimitDelay (at least the
//     Retry-After, capped by MaxRateLimitWait, a little positive jitter; without one, a
//     delay that grows with each rate-limited failure) and does not consume an attempt,
//     up to MaxRateLimitWaits such waits; after that rate-limited failures count as
//     attempts, and their waits go on growing and honouring the Retry-After.
//   - Hooks: OnRetry is called before each sleep, OnGiveUp when Do returns an error.
//
// # Nested layers
//
// One retry layer owns a failure. Do marks the context it passes to its operation; a Do
// that receives such a context (InNested) and whose policy is not Independent makes
// exactly one attempt per outer attempt and returns the error with its classification
// preserved (as a ClassedError), so the outer layer decides whether and when to retry.
// A dependency that always fails, called under two nested layers of 3 attempts each,
// therefore receives 3 calls, not 9. The inner layer's classifier, budget and breaker
// still apply to its attempt. Set Policy.Independent for a layer that must retry on its
// own (for example a fast, silent reconnect under a slow, user-visible retry), and
// Policy.Exhausted to ExhaustedFinal if what it gave up on must not be retried by the
// outer layer. Policy.Name names a layer in its errors and events, so that a failure
// says which layer gave up: "workflow: bigquery: gave up after 3 attempts (attempts
// exhausted): timeoutExceeded".
//
// # Budgets and breakers
//
// A Budget (Policy.Budget), shared by all callers of a dependency, is a token bucket:
// each request earns a tenth of a retry, each retry spends one, a floor keeps one retry a
// second for light traffic, and little credit is saved, so that an outage sees about 1.1
// calls per request from its first second. When it is spent, Do returns at once an error
// wrapping ErrBudgetExhausted and the last error, classified retryable so that a durable
// queue schedules the item later. A Breaker (Policy.Breaker) opens after consecutive
// failures or a failure rate, refuses calls, probes after 1s and, while probes fail,
// after twice as long each time up to 30s; while it is open Do returns an error wrapping
// ErrCircuitOpen without calling the operation. Final errors do not count as dependency
// failures. On the success path neither takes a lock or reads the clock.
//
// # Allocation
//
// On the success path Do makes no allocation when ctx is context.Background(),
// context.TODO(), a context passed by an outer Do, or one made by Scope; otherwise it
// allocates the one small context that carries the nesting marker.
//
// Package retryhttp classifies HTTP responses, parses Retry-After and provides a
// retrying http.RoundTripper.
package retry
