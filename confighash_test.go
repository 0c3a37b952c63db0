package redrive_test

import (
	"context"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redrive/redrive"
	"github.com/redrive/redrive/retry"
)

// hashedStage is a stage with every hashed field set.
func hashedStage() redrive.Stage {
	return redrive.Stage{
		Name: "llm_call", Timeout: 30 * time.Second, Concurrency: 4, CountRateLimitWaits: true,
		Breaker: retry.NewBreaker(retry.BreakerOptions{}),
		Policy: retry.Policy{MaxAttempts: 4, BaseDelay: 30 * time.Second, Multiplier: 4, Jitter: 0.2,
			MaxDelay: 10 * time.Minute, MaxRateLimitWait: time.Minute, MaxRateLimitWaits: 5,
			Classifier: httpClassifier},
	}
}

// httpClassifier is a named classifier: its name, unlike a closure's, is
// the same in every build.
func httpClassifier(err error) (retry.Outcome, bool) { return retry.Outcome{}, false }

// goldenHash is hashedStage's hash. It must never change: attempts stored
// by earlier versions carry it, and operators compare hashes across
// processes, hosts and releases. A change here is a change of the hash
// format; do not update the constant to make the test pass.
const goldenHash = "40a473def2c064fe"

// TestConfigHashStable checks that the hash depends on the configuration
// only: the golden value pins it across builds, a child process computes
// the same, and neither the breaker's identity and state nor the handler
// changes it.
func TestConfigHashStable(t *testing.T) {
	if os.Getenv("REDRIVE_PRINT_CONFIG_HASH") == "1" {
		os.Stdout.WriteString(hashedStage().ConfigHash() + "\n")
		return
	}
	st := hashedStage()
	if got := st.ConfigHash(); got != goldenHash {
		t.Fatalf("ConfigHash = %s, want %s", got, goldenHash)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestConfigHashStable$")
	cmd.Env = append(os.Environ(), "REDRIVE_PRINT_CONFIG_HASH=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child process: %v", err)
	}
	if got := strings.Fields(string(out)); len(got) == 0 || got[0] != goldenHash {
		t.Fatalf("child process printed %q, want %s", out, goldenHash)
	}
	other := hashedStage()
	other.Breaker = retry.NewBreaker(retry.BreakerOptions{})
	other.Breaker.Record(context.DeadlineExceeded)
	other.Handle = func(context.Context, *redrive.Item) ([]byte, error) { return nil, nil }
	if got := other.ConfigHash(); got != goldenHash {
		t.Errorf("another breaker or a handler changed the hash: %s", got)
	}
}

// notHashed lists the fields of Stage and retry.Policy that ConfigHash
// leaves out on purpose, with the reason.
var notHashed = map[string]string{
	"Stage.Handle":       "code, not configuration",
	"Policy.MaxElapsed":  "applies to retry.Do only, not to a durable stage",
	"Policy.Independent": "applies to retry.Do only",
	"Policy.Budget":      "a shared budget's state, not a setting (the engine honours it; its settings live in the Budget)",
	"Policy.Breaker":     "applies to retry.Do only (a stage's breaker is Stage.Breaker)",
	"Policy.OnRetry":     "a hook of retry.Do",
	"Policy.OnGiveUp":    "a hook of retry.Do",
	"Policy.Rand":        "a source of randomness, not a setting",
	"Policy.Name":        "names an in-process layer in its errors; a stage is named by Stage.Name, which is hashed",
	"Policy.Exhausted":   "tells an outer layer how to see this layer's exhaustion; a durable stage is the outermost layer",
}

// TestConfigHashCoversEveryField sets each field of Stage and of its
// Policy, one at a time, and checks that the hash changes, unless the field
// is listed in notHashed. A field added later fails here until ConfigHash
// includes it (one line in confighash.go) or notHashed says why not.
func TestConfigHashCoversEveryField(t *testing.T) {
	base := redrive.Stage{}.ConfigHash()
	check := func(prefix string, typ reflect.Type, set func(i int) (redrive.Stage, bool)) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			name := prefix + "." + f.Name
			if !f.IsExported() || (f.Name == "Policy" || f.Name == "RateLimit") && prefix == "Stage" {
				continue
			}
			st, ok := set(i)
			if !ok {
				if _, skip := notHashed[name]; !skip {
					t.Errorf("%s (%s): the test cannot set it; teach it, and include the field in Stage.ConfigHash or list it in notHashed", name, f.Type)
				}
				continue
			}
			changed := st.ConfigHash() != base
			_, skip := notHashed[name]
			switch {
			case skip && changed:
				t.Errorf("%s is listed in notHashed but changes the hash", name)
			case !skip && !changed:
				t.Errorf("%s does not change Stage.ConfigHash: add it to ConfigHash in confighash.go, or to notHashed with the reason", name)
			}
		}
	}
	check("Stage", reflect.TypeFor[redrive.Stage](), func(i int) (redrive.Stage, bool) {
		var st redrive.Stage
		return st, setNonZero(reflect.ValueOf(&st).Elem().Field(i))
	})
	check("Policy", reflect.TypeFor[retry.Policy](), func(i int) (redrive.Stage, bool) {
		var st redrive.Stage
		return st, setNonZero(reflect.ValueOf(&st.Policy).Elem().Field(i))
	})
	check("RateLimit", reflect.TypeFor[redrive.RateLimit](), func(i int) (redrive.Stage, bool) {
		var st redrive.Stage
		return st, setNonZero(reflect.ValueOf(&st.RateLimit).Elem().Field(i))
	})
}

// setNonZero gives v a value other than its zero value, reporting whether
// it knows how.
func setNonZero(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1.5)
	case reflect.String:
		v.SetString("x")
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
	case reflect.Func:
		if v.Type() == reflect.TypeFor[retry.Classifier]() {
			v.Set(reflect.ValueOf(retry.Classifier(retry.DefaultClassifier)))
			return true
		}
		v.Set(reflect.MakeFunc(v.Type(), func([]reflect.Value) []reflect.Value { panic("not called") }))
	case reflect.Interface:
		return false
	default:
		return false
	}
	return true
}
