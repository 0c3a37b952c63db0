package redrive

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redrive/redrive/retry"
)

// Handler runs one stage for one item. It gets a context that carries the
// stage's timeout and ends when the engine stops, and the item, whose
// Payload is the stage's input. It returns the input of the next stage (or
// the item's final output after the last stage), or an error that the
// stage's classifier sorts into final, retryable or rate limited.
//
// Wrap an error with retry.Final, retry.RateLimited or retry.Retryable to
// decide its class explicitly.
type Handler func(ctx context.Context, item *Item) ([]byte, error)

// Stage is one step of a pipeline.
type Stage struct {
	// Name is unique within the pipeline.
	Name string
	// Handle does the stage's work. Nil for an External stage.
	Handle Handler
	// External makes the stage one that workers outside the process do:
	// the engine never runs it itself; programs in any language lease its
	// items over HTTP from a server (Client.LeaseExternal, which
	// `redrive serve` exposes under /api/v1/leases) and report each
	// result there, under the stage's policy, flow control, breaker and
	// failure budget as for a Go handler. See docs/workers.md. Default
	// false: Handle runs the stage in this process.
	External bool
	// Policy decides attempts, delays and classification. Its zero value
	// takes the retry package's defaults: 3 attempts, exponential backoff
	// from 1 s doubling to at most 60 s with ±20 % jitter. Its attempt,
	// delay, classification and rate-limit fields apply to a durable stage,
	// and its Budget: each first attempt at the stage is a request, and a
	// retry the budget refuses is scheduled no sooner than MaxDelay (so an
	// outage's retries are spread out, never dropped). MaxElapsed, hooks and
	// Breaker are for in-process retries (see Stage.Breaker).
	Policy retry.Policy
	// Timeout bounds one attempt. Default 0: no timeout beyond the lease.
	Timeout time.Duration
	// Concurrency caps the attempts of this stage running at once in one
	// client (the YAML key max_in_flight). Default 0: only the client's
	// Workers bound it.
	Concurrency int
	// Breaker, when set, is consulted before claiming the stage's items:
	// while it is open the stage claims nothing, so an outage neither
	// burns attempts nor fills the dead-letter queue. Every attempt's
	// result is recorded on it; a rate-limited result counts as an answer,
	// not a failure. Default nil: the stage gets a breaker of its own (one
	// per Dependency) that opens after 20 dependency failures in a row and
	// probes again after 1 s, unless RateLimit.Off is set.
	Breaker *retry.Breaker
	// CountRateLimitWaits makes a rate-limited failure use up an attempt
	// of the stage (and count towards Pipeline.MaxAttempts), as when a
	// design counts HTTP 429 among its retriable errors (ADR-0010). The
	// item still waits as long as the dependency asked (Retry-After,
	// capped by Policy.MaxRateLimitWait). Default false: rate-limited
	// waits use up no attempt, up to Policy.MaxRateLimitWaits of them,
	// because a rate limit is the dependency's state, not the item's fault.
	CountRateLimitWaits bool
	// RateLimit paces the calls the stage starts and adapts their rate to
	// the dependency's push backs (see RateLimit and docs/engine.md, "Flow
	// control"). Default: the zero RateLimit, which adapts to an unknown
	// limit from slow start.
	RateLimit RateLimit
	// Dependency names what the stage calls. Stages of any pipeline of the
	// client that name the same dependency share one pace, one gate and one
	// breaker, and must have equal RateLimits; with RateLimit.Rate set, every
	// process sharing the store shares the rate. Default "": the stage is a
	// dependency of its own, named "pipeline/stage".
	Dependency string
}

// Pipeline is a named, ordered list of stages.
type Pipeline struct {
	// Name names the pipeline in the store. Required.
	Name string
	// Stages are the pipeline's stages, in order. At least one.
	Stages []Stage
	// MaxAttempts caps an item's attempts of the whole pipeline, counted
	// as ADR-0010 counts a job's across its steps: the first pass through
	// the stages is attempt 1, and every failed stage attempt that uses up
	// an attempt of its stage starts the next (the retry resumes at the
	// stage that failed; a success moves on within the same attempt). The
	// failure that would start attempt MaxAttempts + 1 makes the item dead
	// with the reason "attempt cap of N across stages reached", even when
	// the failing stage's own policy allows more. Item.FailedAttempts holds
	// the count; a redrive resets it. Default 0: no cap beyond each
	// stage's policy.
	MaxAttempts int

	// hashes caches Stages[i].ConfigHash(), set by Client.Register.
	hashes []string
}

// ErrInvalidPipeline is wrapped by the errors of Pipeline.Validate.
var ErrInvalidPipeline = errors.New("redrive: invalid pipeline")

// Validate reports a pipeline that cannot run.
func (p Pipeline) Validate() error {
	if p.Name == "" {
		return fmt.Errorf("%w: empty name", ErrInvalidPipeline)
	}
	if len(p.Stages) == 0 {
		return fmt.Errorf("%w: pipeline %q has no stages", ErrInvalidPipeline, p.Name)
	}
	if p.MaxAttempts < 0 {
		return fmt.Errorf("%w: pipeline %q: MaxAttempts %d is negative (0 means no cap across stages)", ErrInvalidPipeline, p.Name, p.MaxAttempts)
	}
	seen := make(map[string]bool, len(p.Stages))
	deps := map[string]RateLimit{}
	for i, s := range p.Stages {
		if s.Name == "" {
			return fmt.Errorf("%w: pipeline %q stage %d has no name", ErrInvalidPipeline, p.Name, i)
		}
		if seen[s.Name] {
			return fmt.Errorf("%w: pipeline %q has two stages named %q", ErrInvalidPipeline, p.Name, s.Name)
		}
		seen[s.Name] = true
		if s.Handle == nil && !s.External {
			return fmt.Errorf("%w: pipeline %q stage %q has no handler", ErrInvalidPipeline, p.Name, s.Name)
		}
		if s.Handle != nil && s.External {
			return fmt.Errorf("%w: pipeline %q stage %q is external and has a handler: external workers run it, so leave Handle nil", ErrInvalidPipeline, p.Name, s.Name)
		}
		if err := s.Policy.Validate(); err != nil {
			return fmt.Errorf("%w: pipeline %q stage %q: %w", ErrInvalidPipeline, p.Name, s.Name, err)
		}
		if s.Timeout < 0 || s.Concurrency < 0 {
			return fmt.Errorf("%w: pipeline %q stage %q: negative timeout or concurrency", ErrInvalidPipeline, p.Name, s.Name)
		}
		if err := s.RateLimit.validate(); err != nil {
			return fmt.Errorf("%w: pipeline %q stage %q: %w", ErrInvalidPipeline, p.Name, s.Name, err)
		}
		if s.Dependency != "" {
			if r, ok := deps[s.Dependency]; ok && r != s.RateLimit {
				return fmt.Errorf("%w: pipeline %q stage %q: dependency %q has another rate limit in an earlier stage", ErrInvalidPipeline, p.Name, s.Name, s.Dependency)
			}
			deps[s.Dependency] = s.RateLimit
		}
	}
	return nil
}

// configHash returns the configuration hash of stage i, computed once at
// Register.
func (p *Pipeline) configHash(i int) string {
	if i < 0 || i >= len(p.Stages) {
		return ""
	}
	if i < len(p.hashes) {
		return p.hashes[i]
	}
	return p.Stages[i].ConfigHash()
}

func (p Pipeline) stageIndex(name string) int {
	for i, s := range p.Stages {
		if s.Name == name {
			return i
		}
	}
	return -1
}
