package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/redrive/redrive/web"
)

// loadTokens reads the scoped API tokens of --token-file (when given) and
// REDRIVE_API_TOKENS. Errors name the file or variable and the line, never
// a secret.
func loadTokens(file string) ([]web.Token, error) {
	var out []web.Token
	if file != "" {
		f, err := os.Open(file)
		if err != nil {
			return nil, flagErrorf("token-file", "%v", err)
		}
		defer f.Close()
		ts, err := web.ParseTokens(f, file)
		if err != nil {
			return nil, flagErrorf("token-file", "%v", err)
		}
		out = ts
	}
	if v := os.Getenv(envAPITokens); v != "" {
		ts, err := web.ParseTokens(strings.NewReader(strings.ReplaceAll(v, ";", "\n")), envAPITokens)
		if err != nil {
			return nil, usageErrorf("%v", err)
		}
		for _, t := range ts {
			for _, o := range out {
				if o.Name == t.Name {
					return nil, usageErrorf("%s: token name %q is also in %s", envAPITokens, t.Name, file)
				}
			}
		}
		out = append(out, ts...)
	}
	return out, nil
}

// tokenSummary describes the configured tokens for the log: names and
// scopes, never secrets.
func tokenSummary(legacy string, ts []web.Token) string {
	var parts []string
	if legacy != "" {
		parts = append(parts, "api-token(submit,admin)")
	}
	for _, t := range ts {
		sc := make([]string, len(t.Scopes))
		for i, s := range t.Scopes {
			sc[i] = string(s)
		}
		parts = append(parts, fmt.Sprintf("%s(%s)", t.Name, strings.Join(sc, ",")))
	}
	if len(parts) == 0 {
		return "none: reads open, submit and admin disabled"
	}
	return strings.Join(parts, " ")
}

// envTokenSecrets returns the secrets in REDRIVE_API_TOKENS, to keep them
// out of error messages.
func envTokenSecrets() []string {
	var out []string
	for line := range strings.SplitSeq(strings.ReplaceAll(os.Getenv(envAPITokens), ";", "\n"), "\n") {
		if f := strings.Fields(line); len(f) == 3 {
			out = append(out, f[2])
		}
	}
	return out
}
