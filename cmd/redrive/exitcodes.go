package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/redrive/redrive"
)

// Exit codes that scripts can rely on. They are listed in `redrive --help`
// and in docs/cli.md.
//
// Other commands may define codes of their own above 2 by returning an
// *exitError (see exitWith): the `run` command, for instance, reports the
// status of the run it finished with its own codes, documented in its help.
// Codes 0, 1 and 2 mean the same for every command.
const (
	exitOK       = 0 // success
	exitFailure  = 1 // the command failed (database unreachable, I/O error, ...)
	exitUsage    = 2 // bad usage: unknown command or flag, bad flag or filter value
	exitNotFound = 3 // the run or item named does not exist
	exitConfirm  = 4 // a destructive command needs --yes (stdin is not a terminal)
)

// exitCodesHelp is appended to the root command's help.
const exitCodesHelp = `Exit codes:
  0  success
  1  failure (database unreachable, I/O error, ...)
  2  bad usage: unknown command or flag, bad flag or filter value
  3  not found: the run or item named does not exist
  4  confirmation required: a destructive command (dlq redrive, dlq purge)
     was not confirmed; pass --yes when stdin is not a terminal
  The run command reports the status of its run with codes of its own
  (see redrive run --help).`

// exitError carries the exit status the process ends with. Any command may
// return one (wrapped or not) to choose its exit code; exitCode finds it with
// errors.As. Commands in other files use it too, e.g.
//
//	return &exitError{code: 5, err: fmt.Errorf("run %d aborted: %s", id, reason)}
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// exitWith wraps err so that the process exits with code.
func exitWith(code int, err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: code, err: err}
}

// usageErrorf returns a bad-usage error (exit code 2).
func usageErrorf(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// flagErrorf returns a bad-usage error that names the flag at fault.
func flagErrorf(flag, format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf("invalid --%s: %s", flag, fmt.Sprintf(format, args...))}
}

// exitCode maps an error to the process exit status: 0 for nil, the code of
// an *exitError in its chain, 3 for redrive.ErrNotFound, 2 for cobra's
// command-line errors that were not already typed, and 1 otherwise.
func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	if errors.Is(err, redrive.ErrNotFound) {
		return exitNotFound
	}
	// cobra reports some usage errors as plain errors.
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "required flag", "accepts ", "requires at least", "invalid argument"} {
		if strings.HasPrefix(msg, p) {
			return exitUsage
		}
	}
	return exitFailure
}

// notFound returns, for an error that wraps redrive.ErrNotFound, the
// not-found error (exit code 3) "<what> does not exist (<hint>)": the
// store's own message ("sqlite: get run 42: redrive: not found") names its
// internals, not what the user asked for. Other errors are wrapped with
// what.
func notFound(err error, what, hint string) error {
	if errors.Is(err, redrive.ErrNotFound) {
		return exitWith(exitNotFound, fmt.Errorf("%s does not exist (%s)", what, hint))
	}
	return fmt.Errorf("%s: %w", what, err)
}

// errorMessage is the message the command prints for err, after its own
// "redrive: ": the message without the package prefixes that the program's
// name already says ("redrive: runner: bad usage: redrive: the named run
// ..." reads "the named run ...").
func errorMessage(err error) string {
	msg := err.Error()
	for {
		trimmed := msg
		for _, p := range []string{"redrive: ", "runner: bad usage: ", "runner: "} {
			trimmed = strings.TrimPrefix(trimmed, p)
		}
		if trimmed == msg {
			return msg
		}
		msg = trimmed
	}
}
