package main

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/cobra"
)

// logFormat is the value of the global --log-format flag.
type logFormat string

// The log formats.
const (
	logText logFormat = "text"
	logJSON logFormat = "json"
)

func (f *logFormat) String() string { return string(*f) }
func (f *logFormat) Type() string   { return "text|json" }

func (f *logFormat) Set(s string) error {
	switch logFormat(s) {
	case logText, logJSON:
		*f = logFormat(s)
		return nil
	}
	return fmt.Errorf("unknown log format %q: use text or json", s)
}

// addLogFlags adds the persistent --log-format flag to root.
func addLogFlags(root *cobra.Command) {
	f := logText
	root.PersistentFlags().Var(&f, "log-format", "format of log lines on stderr: text or json (slog)")
}

// newLogger returns the slog logger writing to w in the --log-format of
// cmd (text when the flag is absent).
func newLogger(cmd *cobra.Command, w io.Writer) *slog.Logger {
	if fl := cmd.Flag("log-format"); fl != nil && fl.Value.String() == string(logJSON) {
		return slog.New(slog.NewJSONHandler(w, nil))
	}
	return slog.New(slog.NewTextHandler(w, nil))
}
