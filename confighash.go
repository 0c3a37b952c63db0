package redrive

import (
	"crypto/sha256"
	"encoding/hex"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/redrive/redrive/retry"
)

// ConfigHash returns a stable hash of the stage's configuration: its name,
// the fields of its Policy that a durable stage applies (attempts, backoff,
// delays, jitter, rate-limit waits and the classifier), Timeout,
// Concurrency, CountRateLimitWaits and whether it has a Breaker. The engine
// records it with every attempt (Attempt.ConfigHash), as ADR-003 records a
// stage_config_hash in stages_applied, so that the attempts made after a
// policy change can be told from those made before.
//
// The hash is 16 hex digits (64 bits of SHA-256) of a canonical text of
// those fields, written in a fixed order: the same configuration gives the
// same hash in every process and after restarts, whatever the build. Fields
// are taken as written, not with defaults applied (MaxAttempts 0 and 3 hash
// differently). A classifier is identified by its function's name, so
// DefaultClassifier and a named function of your own are told apart, but
// two closures made by one constructor (two retry.Chain results) are not.
// The handler and the breaker's thresholds are not part of it: the hash
// describes the stage's settings, not its code or the breaker's state.
func (s Stage) ConfigHash() string {
	var c configText
	c.text("stage.name", s.Name)
	c.duration("stage.timeout", s.Timeout)
	c.integer("stage.concurrency", s.Concurrency)
	c.flag("stage.count_rate_limit_waits", s.CountRateLimitWaits)
	c.flag("stage.breaker", s.Breaker != nil)
	// Flow control came later: its lines are written only when set, so
	// that the hash of a stage without it is what it always was.
	if s.Dependency != "" {
		c.text("stage.dependency", s.Dependency)
	}
	if s.External {
		c.flag("stage.external", true)
	}
	if r := s.RateLimit; r != (RateLimit{}) {
		c.number("stage.rate_limit.rate", r.Rate)
		c.integer("stage.rate_limit.burst", r.Burst)
		c.number("stage.rate_limit.min_rate", r.MinRate)
		c.duration("stage.rate_limit.max_limited", r.MaxLimited)
		c.flag("stage.rate_limit.off", r.Off)
	}
	p := s.Policy
	c.integer("policy.max_attempts", p.MaxAttempts)
	c.text("policy.backoff", p.Backoff.String())
	c.duration("policy.base_delay", p.BaseDelay)
	c.number("policy.multiplier", p.Multiplier)
	c.duration("policy.max_delay", p.MaxDelay)
	c.number("policy.jitter", p.Jitter)
	c.text("policy.jitter_mode", p.JitterMode.String())
	c.duration("policy.max_rate_limit_wait", p.MaxRateLimitWait)
	c.integer("policy.max_rate_limit_waits", p.MaxRateLimitWaits)
	c.text("policy.classifier", funcName(p.Classifier))
	sum := sha256.Sum256([]byte(c.b.String()))
	return hex.EncodeToString(sum[:8])
}

// configText is the canonical text ConfigHash hashes: one "key=value" line
// per field, in the order written. A field added to Stage or to the durable
// part of retry.Policy takes one more line in ConfigHash (a test fails
// until it does); values are quoted so that no value can fake a line.
type configText struct{ b strings.Builder }

func (c *configText) field(k, v string) {
	c.b.WriteString(k)
	c.b.WriteByte('=')
	c.b.WriteString(v)
	c.b.WriteByte('\n')
}

func (c *configText) text(k, v string)                   { c.field(k, strconv.Quote(v)) }
func (c *configText) integer(k string, v int)            { c.field(k, strconv.Itoa(v)) }
func (c *configText) flag(k string, v bool)              { c.field(k, strconv.FormatBool(v)) }
func (c *configText) duration(k string, v time.Duration) { c.field(k, strconv.FormatInt(int64(v), 10)) }
func (c *configText) number(k string, v float64) {
	c.field(k, strconv.FormatFloat(v, 'g', -1, 64))
}

// funcName identifies a classifier by its function's name, which, unlike
// its address, is the same in every process of every build; "" for nil.
func funcName(f retry.Classifier) string {
	if f == nil {
		return ""
	}
	fn := runtime.FuncForPC(reflect.ValueOf(f).Pointer())
	if fn == nil {
		return "?"
	}
	return fn.Name()
}
