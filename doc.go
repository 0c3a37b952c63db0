// Package redrive is a durable engine that processes work items reliably when
// what they depend on fails.
//
// A [Pipeline] is a named, ordered list of [Stage]s. Items are submitted in
// runs ([Client.StartRun]); each item moves through the stages independently.
// A stage failure is classified by the stage's retry policy (package
// github.com/redrive/redrive/retry) as final, retryable or rate limited: a
// retryable failure schedules another attempt after the policy's delay, a
// rate-limited one waits for the dependency's Retry-After without consuming
// an attempt, and a final failure (or exhausted attempts) moves the item to
// the dead-letter queue with a [Reason]. Dead or canceled items can be
// redriven ([Client.Redrive]) from the stage that failed once the cause is
// fixed.
//
// Every item ends succeeded, dead with a reason, or canceled with a reason,
// and a run's [Counts] always add up to its total. State and the full attempt
// history live in a [Store]: package sqlite is the embedded default, package
// postgres serves many worker processes on many hosts.
package redrive
