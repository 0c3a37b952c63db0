package runner

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"text/template"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/retry"
)

// Pos is a position in a pipeline file: 1-based line and column.
type Pos struct {
	Line, Column int
}

// Spec is a pipeline file: a named list of stages, each an exec or an http
// stage with its retry policy, and the options of the runs made from it.
// See docs/runner.md for the format.
type Spec struct {
	// File is the path the spec was loaded from ("" for Parse without one).
	File string `yaml:"-"`
	// Name names the pipeline in the database. Default: the file's base
	// name without its extension.
	Name string `yaml:"name"`
	// Workers is how many attempts run at once (the --workers flag wins).
	// Default 8.
	Workers int `yaml:"workers"`
	// MaxAttempts caps each item's attempts across all stages, counted as
	// ADR-0010 counts a job's (redrive.Pipeline.MaxAttempts): the first
	// pass is attempt 1 and each failed stage attempt that uses up an
	// attempt of its stage starts the next. Default 0: no cap beyond each
	// stage's retry.max_attempts.
	MaxAttempts int `yaml:"max_attempts"`
	// Run holds the run options.
	Run RunSpec `yaml:"run"`
	// Stages are the pipeline's stages, in order. At least one.
	Stages []StageSpec `yaml:"stages"`
	// Webhook, when set, is where the pipeline's notifications go (used by
	// serve --pipelines workers). Default none.
	Webhook *WebhookSpec `yaml:"webhook"`
	// Alerts are the pipeline's alert thresholds (used by serve
	// --pipelines). Default: serve's flags, else the defaults.
	Alerts AlertsSpec `yaml:"alerts"`

	// Pos is where the mapping starts in the file (set by Parse).
	Pos Pos `yaml:"-"`
	// Keys holds the position of each key's value (set by Parse).
	Keys map[string]Pos `yaml:"-"`
}

// DefaultWorkers is Spec.Workers when neither the file nor --workers set it.
const DefaultWorkers = 8

// RunSpec holds the options of a run (redrive.RunOptions). Nil fields take
// the engine's defaults: success_threshold 0.95, partial_threshold 0.50,
// failure_budget none, min_items 50.
type RunSpec struct {
	// SuccessThreshold is the success rate at or above which a run is
	// completed. Default 0.95.
	SuccessThreshold *float64 `yaml:"success_threshold"`
	// PartialThreshold is the success rate at or above which a run is
	// partial_success rather than failed. Default 0.50.
	PartialThreshold *float64 `yaml:"partial_threshold"`
	// FailureBudget is the dead rate above which the run aborts. Default 0:
	// no budget.
	FailureBudget *float64 `yaml:"failure_budget"`
	// MinItems is how many items must have finished before the failure
	// budget is judged. Default 50 (or the run's size when smaller).
	MinItems *int `yaml:"min_items"`

	// Keys holds the position of each key's value (set by Parse).
	Keys map[string]Pos `yaml:"-"`
}

// StageSpec is one stage of a pipeline file. Exactly one of Exec, HTTP and
// External is set for a stage that runs; a file that only describes retry
// policies (see examples/policies) may leave all unset.
type StageSpec struct {
	// Name is unique within the pipeline.
	Name string `yaml:"name"`
	// Exec runs a command per item.
	Exec *ExecSpec `yaml:"exec"`
	// HTTP makes a request per item.
	HTTP *HTTPSpec `yaml:"http"`
	// External makes the stage one that long-running workers in any
	// language do: they lease its items over HTTP from `redrive serve`
	// (docs/workers.md), under the stage's retry, rate_limit and
	// concurrency like any stage. Written "external: true". Default false.
	External bool `yaml:"external"`
	// Retry is the stage's retry policy.
	Retry RetrySpec `yaml:"retry"`
	// Timeout bounds one attempt. Default 0: 5 minutes for exec and
	// http stages (the runner never runs an attempt without a bound).
	Timeout Duration `yaml:"timeout"`
	// Concurrency caps the stage's attempts running at once. Default 0:
	// only workers bound it.
	Concurrency int `yaml:"concurrency"`
	// RateLimit is the most calls per unit of time the stage starts ("50/s",
	// "3000/min"), over every process sharing the database, or "off". Default
	// unset: the limit is unknown and the stage adapts to its dependency (slow
	// start, then lower on 429s and higher on successes).
	RateLimit Rate `yaml:"rate_limit"`
	// Burst is how many calls may start together after a quiet spell.
	// Default 0: 1, so that calls are evenly spaced.
	Burst int `yaml:"burst"`
	// MaxInFlight caps the stage's attempts running at once in one process;
	// the same setting as concurrency. Default 0: only workers bound it.
	MaxInFlight int `yaml:"max_in_flight"`
	// Dependency names what the stage calls: stages that name the same
	// dependency share one rate limit and one gate. Default "": the stage is
	// a dependency of its own.
	Dependency string `yaml:"dependency"`
	// MaxLimited bounds how long items wait for free while the whole stage is
	// rate limited, before their own allowance pays. Default 0: 10m.
	MaxLimited Duration `yaml:"max_limited"`

	// Pos is where the mapping starts in the file (set by Parse).
	Pos Pos `yaml:"-"`
	// Keys holds the position of each key's value (set by Parse).
	Keys map[string]Pos `yaml:"-"`
}

// DefaultStageTimeout bounds an attempt of a stage that sets no timeout.
const DefaultStageTimeout = 5 * time.Minute

// ExecSpec is an exec stage: the command gets the item's JSON on stdin and
// writes the next stage's input (JSON) on stdout. See docs/runner.md for
// the exit codes.
type ExecSpec struct {
	// Command is the program. A name without a slash is looked up in PATH;
	// a relative path with a slash is relative to the pipeline file's
	// directory. Required.
	Command string `yaml:"command"`
	// Args are its arguments, ${VAR} expanded from the environment.
	// Default none.
	Args []string `yaml:"args"`
	// Env adds variables to the command's environment (which is otherwise
	// the runner's), ${VAR} expanded. Default none.
	Env map[string]string `yaml:"env"`
	// Dir is the command's working directory, relative to the pipeline
	// file's directory. Default: the runner's working directory.
	Dir string `yaml:"dir"`

	// Pos is where the mapping starts in the file (set by Parse).
	Pos Pos `yaml:"-"`
	// Keys holds the position of each key's value (set by Parse).
	Keys map[string]Pos `yaml:"-"`
}

// HTTPSpec is an http stage. URL and Body are text/template templates over
// the item's decoded JSON (with the functions json, env and urlquery);
// ${VAR} in URL and header values is replaced by the environment variable.
type HTTPSpec struct {
	// Method is the request method. Default POST.
	Method string `yaml:"method"`
	// URL is the request URL template. Required.
	URL string `yaml:"url"`
	// Body is the request body template. Default: the item's JSON as is
	// (for methods other than GET and HEAD, which send no body).
	Body *string `yaml:"body"`
	// Headers are request headers; values are ${VAR} expanded. A
	// Content-Type of application/json is added when a body is sent and
	// none is given.
	Headers map[string]string `yaml:"headers"`
	// Output picks the stage's output: "body" (the response body, which must
	// be JSON) or "wrap" ({"input": <item>, "response": <body>}). Default body.
	Output string `yaml:"output"`

	// Pos is where the mapping starts in the file (set by Parse).
	Pos Pos `yaml:"-"`
	// Keys holds the position of each key's value (set by Parse).
	Keys map[string]Pos `yaml:"-"`

	url, body *template.Template
}

// RetrySpec is a stage's retry policy (retry.Policy). Zero fields take the
// retry package's defaults: max_attempts 3, backoff exponential, base 1s,
// multiplier 2, max_delay 60s, jitter 0.2 proportional,
// max_rate_limit_wait 5m, max_rate_limit_waits 10.
type RetrySpec struct {
	// MaxAttempts counts attempts including the first. Default 3.
	MaxAttempts int `yaml:"max_attempts"`
	// Backoff is exponential, constant (or fixed) or linear. Default
	// exponential.
	Backoff string `yaml:"backoff"`
	// Base is the delay after the first failed attempt. Default 1s.
	Base Duration `yaml:"base"`
	// Multiplier is the exponential growth factor, at least 1. Default 2.
	Multiplier float64 `yaml:"multiplier"`
	// MaxDelay caps one delay, jitter included. Default 60s.
	MaxDelay Duration `yaml:"max_delay"`
	// Jitter is the ± fraction of proportional jitter, in [0, 1]; 0 means
	// no jitter. Default 0.2.
	Jitter *float64 `yaml:"jitter"`
	// JitterMode is proportional, none, full, equal or decorrelated.
	// Default proportional (none when jitter is 0).
	JitterMode string `yaml:"jitter_mode"`
	// MaxRateLimitWait caps one Retry-After wait. Default 5m.
	MaxRateLimitWait Duration `yaml:"max_rate_limit_wait"`
	// MaxRateLimitWaits bounds the rate-limited waits that do not consume
	// attempts. Default 10.
	MaxRateLimitWaits int `yaml:"max_rate_limit_waits"`
	// CountRateLimitWaits makes every rate-limited failure use up an
	// attempt (and count towards the pipeline's max_attempts), still
	// waiting as long as the dependency asked
	// (redrive.Stage.CountRateLimitWaits). Default false.
	CountRateLimitWaits bool `yaml:"count_rate_limit_waits"`

	// Pos is where the mapping starts in the file (set by Parse).
	Pos Pos `yaml:"-"`
	// Keys holds the position of each key's value (set by Parse).
	Keys map[string]Pos `yaml:"-"`
}

// LoadFile reads and validates a pipeline file. Its errors carry the file,
// line and column ("pipeline.yaml:12:5: unknown key ...") and wrap
// ErrInvalidSpec when the content is at fault.
func LoadFile(path string) (*Spec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	return Parse(path, b)
}

// Parse parses and validates the content of a pipeline file; file names it
// in errors and anchors relative commands.
func Parse(file string, b []byte) (*Spec, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &PosError{File: file, Line: 1, Msg: "empty pipeline file", Err: ErrInvalidSpec}
		}
		return nil, syntaxError(file, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, &PosError{File: file, Line: extra.Line, Column: extra.Column, Msg: "more than one YAML document", Err: ErrInvalidSpec}
	} else if !errors.Is(err, io.EOF) {
		return nil, syntaxError(file, err)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	s := &Spec{File: file}
	if err := decodeStrict(root, s); err != nil {
		return nil, specError(file, err)
	}
	if err := s.validate(); err != nil {
		return nil, specError(file, err)
	}
	return s, nil
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func syntaxError(file string, err error) error {
	msg := err.Error()
	line := 0
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		fmt.Sscan(m[1], &line)
		msg = m[2]
	} else {
		msg = strings.TrimPrefix(msg, "yaml: ")
	}
	return &PosError{File: file, Line: line, Msg: "invalid YAML: " + msg, Err: errors.Join(ErrInvalidSpec, err)}
}

func specError(file string, err error) error {
	var pe *posError
	if errors.As(err, &pe) {
		inner := ErrInvalidSpec
		if pe.err != nil {
			inner = errors.Join(ErrInvalidSpec, pe.err)
		}
		return &PosError{File: file, Line: pe.line, Column: pe.col, Msg: pe.msg, Err: inner}
	}
	return fmt.Errorf("%s: %w: %w", file, ErrInvalidSpec, err)
}

func at(p Pos, format string, a ...any) error {
	return &posError{line: p.Line, col: p.Column, msg: fmt.Sprintf(format, a...)}
}

// keyPos returns the position of key's value, or else of the mapping.
func keyPos(keys map[string]Pos, key string, fallback Pos) Pos {
	if p, ok := keys[key]; ok {
		return p
	}
	return fallback
}

var stageName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

func (s *Spec) validate() error {
	if s.Name == "" {
		base := filepath.Base(s.File)
		s.Name = strings.TrimSuffix(base, filepath.Ext(base))
	}
	if s.Name == "" || !stageName.MatchString(s.Name) {
		return at(keyPos(s.Keys, "name", s.Pos), "pipeline name %q: want letters, digits, '_', '.' or '-'", s.Name)
	}
	if s.Workers < 0 {
		return at(keyPos(s.Keys, "workers", s.Pos), "workers %d must not be negative", s.Workers)
	}
	if s.MaxAttempts < 0 {
		return at(keyPos(s.Keys, "max_attempts", s.Pos), "max_attempts %d must not be negative (0 or unset means no cap across stages)", s.MaxAttempts)
	}
	if err := s.Run.validate(s.Pos); err != nil {
		return err
	}
	if err := s.Alerts.validate(keyPos(s.Keys, "alerts", s.Pos)); err != nil {
		return err
	}
	if s.Webhook != nil {
		if err := s.Webhook.validate(); err != nil {
			return err
		}
	}
	if len(s.Stages) == 0 {
		return at(keyPos(s.Keys, "stages", s.Pos), "a pipeline needs at least one stage under \"stages\"")
	}
	seen := map[string]bool{}
	for i := range s.Stages {
		st := &s.Stages[i]
		if st.Name == "" {
			return at(st.Pos, "stage %d has no name", i+1)
		}
		if !stageName.MatchString(st.Name) {
			return at(keyPos(st.Keys, "name", st.Pos), "stage name %q: want letters, digits, '_', '.' or '-'", st.Name)
		}
		if seen[st.Name] {
			return at(keyPos(st.Keys, "name", st.Pos), "two stages are named %q", st.Name)
		}
		seen[st.Name] = true
		if st.Exec != nil && st.HTTP != nil {
			return at(keyPos(st.Keys, "http", st.Pos), "stage %q has both exec and http; choose one", st.Name)
		}
		if st.External && (st.Exec != nil || st.HTTP != nil) {
			return at(keyPos(st.Keys, "external", st.Pos), "stage %q is external (worked by workers that lease its items over HTTP) and has exec or http too; choose one", st.Name)
		}
		if st.Concurrency < 0 {
			return at(keyPos(st.Keys, "concurrency", st.Pos), "concurrency %d must not be negative", st.Concurrency)
		}
		if err := st.validateFlow(); err != nil {
			return err
		}
		if st.Exec != nil {
			if strings.TrimSpace(st.Exec.Command) == "" {
				return at(keyPos(st.Exec.Keys, "command", st.Exec.Pos), "stage %q: exec needs a command", st.Name)
			}
		}
		if st.HTTP != nil {
			if err := st.HTTP.compile(st.Name); err != nil {
				return err
			}
		}
		if _, err := st.Retry.policy(); err != nil {
			return err
		}
	}
	return nil
}

func (r *RunSpec) validate(fallback Pos) error {
	for _, f := range []struct {
		key string
		v   *float64
	}{{"success_threshold", r.SuccessThreshold}, {"partial_threshold", r.PartialThreshold}, {"failure_budget", r.FailureBudget}} {
		if f.v != nil && (math.IsNaN(*f.v) || *f.v < 0 || *f.v > 1) {
			return at(keyPos(r.Keys, f.key, fallback), "%s %v must be between 0 and 1", f.key, *f.v)
		}
	}
	if r.SuccessThreshold != nil && r.PartialThreshold != nil && *r.PartialThreshold > *r.SuccessThreshold {
		return at(keyPos(r.Keys, "partial_threshold", fallback), "partial_threshold %v exceeds success_threshold %v", *r.PartialThreshold, *r.SuccessThreshold)
	}
	if r.MinItems != nil && *r.MinItems < 0 {
		return at(keyPos(r.Keys, "min_items", fallback), "min_items %d must not be negative", *r.MinItems)
	}
	return nil
}

// Options returns the run options the file sets (zero fields: defaults).
func (r RunSpec) Options() redrive.RunOptions {
	var o redrive.RunOptions
	if r.SuccessThreshold != nil {
		o.SuccessThreshold = *r.SuccessThreshold
	}
	if r.PartialThreshold != nil {
		o.PartialThreshold = *r.PartialThreshold
	}
	if r.FailureBudget != nil {
		o.FailureBudget = *r.FailureBudget
	}
	if r.MinItems != nil {
		o.MinItems = *r.MinItems
	}
	return o
}

// policy converts the spec to a retry.Policy, reporting bad values at
// their position.
func (r *RetrySpec) policy() (retry.Policy, error) {
	p := retry.Policy{
		MaxAttempts:       r.MaxAttempts,
		BaseDelay:         time.Duration(r.Base),
		Multiplier:        r.Multiplier,
		MaxDelay:          time.Duration(r.MaxDelay),
		MaxRateLimitWait:  time.Duration(r.MaxRateLimitWait),
		MaxRateLimitWaits: r.MaxRateLimitWaits,
	}
	pos := func(key string) Pos { return keyPos(r.Keys, key, r.Pos) }
	if r.MaxAttempts < 0 {
		return p, at(pos("max_attempts"), "max_attempts %d must be at least 1 (0 or unset means %d)", r.MaxAttempts, retry.DefaultMaxAttempts)
	}
	b, err := retry.ParseBackoff(r.Backoff)
	if err != nil {
		return p, at(pos("backoff"), "backoff %q: want exponential, constant or linear", r.Backoff)
	}
	p.Backoff = b
	if r.Multiplier != 0 && (math.IsNaN(r.Multiplier) || r.Multiplier < 1) {
		return p, at(pos("multiplier"), "multiplier %v must be at least 1", r.Multiplier)
	}
	jm, err := retry.ParseJitterMode(r.JitterMode)
	if err != nil {
		return p, at(pos("jitter_mode"), "jitter_mode %q: want proportional, none, full, equal or decorrelated", r.JitterMode)
	}
	p.JitterMode = jm
	if r.Jitter != nil {
		j := *r.Jitter
		if math.IsNaN(j) || j < 0 || j > 1 {
			return p, at(pos("jitter"), "jitter %v must be between 0 and 1 (a fraction: 0.2 means ±20%%)", j)
		}
		if j == 0 {
			if r.JitterMode != "" && jm != retry.JitterNone {
				return p, at(pos("jitter"), "jitter 0 means no jitter, but jitter_mode is %q", r.JitterMode)
			}
			p.JitterMode = retry.JitterNone
		} else {
			if jm != retry.JitterProportional {
				return p, at(pos("jitter"), "jitter is the fraction of proportional jitter; jitter_mode %q does not use it", r.JitterMode)
			}
			p.Jitter = j
		}
	}
	if p.BaseDelay > 0 && p.MaxDelay > 0 && p.MaxDelay < p.BaseDelay {
		return p, at(pos("max_delay"), "max_delay %v is less than base %v", p.MaxDelay, p.BaseDelay)
	}
	if p.BaseDelay > retry.DefaultMaxDelay && p.MaxDelay == 0 {
		return p, at(pos("base"), "base %v exceeds the default max_delay %v; set max_delay", p.BaseDelay, retry.DefaultMaxDelay)
	}
	if r.MaxRateLimitWaits < 0 {
		return p, at(pos("max_rate_limit_waits"), "max_rate_limit_waits %d must not be negative", r.MaxRateLimitWaits)
	}
	if r.CountRateLimitWaits && r.MaxRateLimitWaits != 0 {
		return p, at(pos("max_rate_limit_waits"), "max_rate_limit_waits counts the waits that use up no attempt; with count_rate_limit_waits every wait uses one up: remove one of them")
	}
	if err := p.Validate(); err != nil {
		return p, at(r.Pos, "retry: %v", err)
	}
	return p, nil
}

// Stage returns the stage named name.
func (s *Spec) Stage(name string) (*StageSpec, error) {
	for i := range s.Stages {
		if s.Stages[i].Name == name {
			return &s.Stages[i], nil
		}
	}
	names := make([]string, len(s.Stages))
	for i, st := range s.Stages {
		names[i] = st.Name
	}
	return nil, fmt.Errorf("runner: %s has no stage %q (stages: %s)", s.File, name, strings.Join(names, ", "))
}

// StagePolicy returns the retry policy of the stage named name, as the
// runner uses it (zero fields take the retry package's defaults).
func (s *Spec) StagePolicy(name string) (retry.Policy, error) {
	st, err := s.Stage(name)
	if err != nil {
		return retry.Policy{}, err
	}
	p, err := st.Retry.policy()
	if err != nil {
		return retry.Policy{}, specError(s.File, err)
	}
	return p, nil
}

// StageNames returns the names of the stages in order.
func (s *Spec) StageNames() []string {
	names := make([]string, len(s.Stages))
	for i, st := range s.Stages {
		names[i] = st.Name
	}
	return names
}

// dir is the directory relative commands and dirs are resolved against.
func (s *Spec) dir() string {
	if s.File == "" {
		return "."
	}
	return filepath.Dir(s.File)
}

// expandEnv replaces ${VAR} (only the braced form, so that a literal $ in
// a command line survives) with the environment variable's value.
func expandEnv(s string) string {
	return envRef.ReplaceAllStringFunc(s, func(m string) string {
		return os.Getenv(m[2 : len(m)-1])
	})
}

var envRef = regexp.MustCompile(`\$\{[A-Za-z_][A-Za-z0-9_]*\}`)
